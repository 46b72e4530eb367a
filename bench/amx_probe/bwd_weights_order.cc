// In which order oneDNN 2.6's AMX backward-weights convolution sums a bf16 weight gradient's products, at the
// ResNet-18 shapes whose channels-last weight gradients it computes (output maps above 64 pixels: layer1,
// layer2 and the stride-2 convolution into layer2, on 28x28 images, batch 64; and layer1 with 4 images),
// NHWC as the engine gives it: the primitive's float32 gradient is compared bit for bit with an AMX
// reference that accumulates each 16x16 tile of one tap's gradient (16 output x 16 input channels) over a
// sequence of output pixels, 32 per TDPBF16PS, under three orders: each output row's pixels padded with
// zeros to 32 (one TDPBF16PS a row), the rows in order onto one running sum; the same with each image summed
// from zero and the images added; and all pixels one after another, 32 at a time across rows. An order with
// no differing output is one a kernel of our own could keep and give the primitive's bits.
//
//   bwd_weights_order  (built and run by bench/amx_probe/run.sh)
#include <immintrin.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <vector>

#include "amx_tiles.h"
#include "conv_probe.h"

namespace {

using amx_probe::ToBf16;

using Shape = amx_probe::ConvShape;
constexpr Shape kShapes[] = {{"layer1", 64, 64, 64, 28, 28, 1},
                             {"layer2", 64, 128, 128, 14, 14, 1},
                             {"layer2.0", 64, 64, 128, 28, 28, 2},
                             {"layer1, 4 images", 4, 64, 64, 28, 28, 1}};

// oneDNN's backward-weights primitive on s (x and gy bf16 NHWC, the gradient float32), reordered to
// [out, c, 3, 3]; returns its name.
std::string OneDnnWeightGradient(const Shape& s, const std::vector<uint16_t>& x,
                                 const std::vector<uint16_t>& gy, std::vector<float>& gw) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::dims src = s.src(), wei = s.weights(), dst = s.dst(), strides = s.strides(),
                           padding = s.padding();
  const dnnl::memory::desc x_md(src, dt::bf16, tag::acdb), gy_md(dst, dt::bf16, tag::acdb);
  const dnnl::convolution_forward::primitive_desc fwd = amx_probe::ForwardHint(s, engine);
  const dnnl::convolution_backward_weights::primitive_desc bwd(
      dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, x_md,
                                               dnnl::memory::desc(wei, dt::f32, tag::any), gy_md, strides,
                                               padding, padding),
      engine, fwd);
  dnnl::memory x_mem(x_md, engine, const_cast<uint16_t*>(x.data()));
  dnnl::memory gy_mem(gy_md, engine, const_cast<uint16_t*>(gy.data()));
  dnnl::memory gw_mem(bwd.diff_weights_desc(), engine), gw_user({wei, dt::f32, tag::oihw}, engine, gw.data());
  dnnl::convolution_backward_weights(bwd).execute(
      stream, {{DNNL_ARG_SRC, x_mem}, {DNNL_ARG_DIFF_DST, gy_mem}, {DNNL_ARG_DIFF_WEIGHTS, gw_mem}});
  dnnl::reorder(gw_mem, gw_user).execute(stream, gw_mem, gw_user);
  stream.wait();
  return bwd.impl_info_str();
}

// One order: the output pixels (n * oh * ow indices, -1 a zero) in the order they are summed, a multiple of
// 32 long, and where a partial sum starts from zero (to be added to the sum before it).
struct Order {
  std::vector<long> pixels;
  std::vector<char> restart;
};

// kind 0: rows padded to 32, one running sum; 1: the same, each image from zero; 2: pixels back to back.
Order MakeOrder(const Shape& s, int kind) {
  Order order;
  const auto pad_to_32 = [&] {
    while (order.pixels.size() % 32 != 0) {
      order.pixels.push_back(-1);
      order.restart.push_back(0);
    }
  };
  for (long row = 0; row < s.n * s.oh(); ++row) {
    if (kind != 2) pad_to_32();
    const bool restart = kind == 1 && row % s.oh() == 0;
    for (long ox = 0; ox < s.ow(); ++ox) {
      order.pixels.push_back(row * s.ow() + ox);
      order.restart.push_back(restart && ox == 0);
    }
  }
  pad_to_32();
  return order;
}

// gw [out, c, 3, 3] summed in `order`, tap by tap, by AMX tiles.
__attribute__((target("amx-tile,amx-bf16"))) void ReferenceWeightGradient(const Shape& s,
                                                                          const std::vector<uint16_t>& x,
                                                                          const std::vector<uint16_t>& gy,
                                                                          const Order& order,
                                                                          std::vector<float>& gw) {
  const amx_probe::TileConfig config = amx_probe::SixteenRowTiles(3);
  _tile_loadconfig(&config);
  const long K = static_cast<long>(order.pixels.size()), P = s.oh() * s.ow();
  std::vector<uint16_t> a(s.out * K), b(K * 16);
  std::vector<float> tile(256), total(256);
  for (long k = 0; k < K; ++k) {
    for (long o = 0; o < s.out; ++o) a[o * K + k] = order.pixels[k] < 0 ? 0 : gy[order.pixels[k] * s.out + o];
  }
  for (int t = 0; t < 9; ++t) {
    for (long c0 = 0; c0 < s.c; c0 += 16) {
      for (long k = 0; k < K; ++k) {  // the input pixel tap t reads for pixels[k], pair-interleaved
        const long p = order.pixels[k], i = p / P, oy = p % P / s.ow(), ox = p % s.ow();
        const long iy = oy * s.stride + t / 3 - 1, ix = ox * s.stride + t % 3 - 1;
        const bool inside = p >= 0 && iy >= 0 && iy < s.h && ix >= 0 && ix < s.w;
        for (int j = 0; j < 16; ++j)
          b[(k / 2) * 32 + j * 2 + k % 2] = inside ? x[((i * s.h + iy) * s.w + ix) * s.c + c0 + j] : 0;
      }
      for (long o0 = 0; o0 < s.out; o0 += 16) {
        bool first = true;
        const auto fold = [&] {
          _tile_stored(0, tile.data(), 64);
          for (int e = 0; e < 256; ++e) total[e] = first ? tile[e] : total[e] + tile[e];
          first = false;
        };
        _tile_zero(0);
        for (long k0 = 0; k0 < K; k0 += 32) {
          if (k0 > 0 && order.restart[k0]) {
            fold();
            _tile_zero(0);
          }
          _tile_loadd(1, a.data() + o0 * K + k0, K * 2);
          _tile_loadd(2, b.data() + (k0 / 2) * 32, 64);
          _tile_dpbf16ps(0, 1, 2);
        }
        fold();
        for (int r = 0; r < 16; ++r) {
          for (int j = 0; j < 16; ++j) gw[((o0 + r) * s.c + c0 + j) * 9 + t] = total[r * 16 + j];
        }
      }
    }
  }
  _tile_release();
}

}  // namespace

int main() {
  if (!amx_probe::RequestTileData()) {
    std::printf(
        "bwd_weights_order: the kernel does not grant AMX tile data (arch_prctl); nothing to compare\n");
    return 0;
  }
  const char* names[] = {"rows padded to 32, in order", "rows padded to 32, images added",
                         "pixels back to back"};
  for (const Shape& s : kShapes) {
    std::mt19937 gen(7);
    std::normal_distribution<float> normal;
    std::vector<uint16_t> x(s.n * s.h * s.w * s.c), gy(s.n * s.oh() * s.ow() * s.out);
    for (uint16_t& v : x) v = ToBf16(normal(gen));
    for (uint16_t& v : gy) v = ToBf16(0.01f * normal(gen));
    std::vector<float> theirs(s.out * s.c * 9), ours(theirs.size());
    const std::string implementation = OneDnnWeightGradient(s, x, gy, theirs);
    for (int kind = 0; kind < 3; ++kind) {
      ReferenceWeightGradient(s, x, gy, MakeOrder(s, kind), ours);
      long differ = 0;
      for (size_t i = 0; i < ours.size(); ++i) differ += std::memcmp(&ours[i], &theirs[i], 4) != 0;
      std::printf("%-17s %ld->%ld %ldx%ld s%ld oneDNN %s; %s: %ld of %zu outputs differ\n", s.name, s.c,
                  s.out, s.h, s.w, s.stride, implementation.c_str(), names[kind], differ, ours.size());
    }
  }
  return 0;
}
