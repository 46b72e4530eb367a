// In which order oneDNN 2.6's AMX backward-data convolution sums a bf16 input gradient's products, at
// ResNet-18's 3x3 shapes on 28x28 images (padding 1, stride 1 and the stride-2 ones, batch 64, NHWC as the
// engine's channels-last activations give it): the primitive's float32 output is compared bit for bit with an
// AMX reference that accumulates each 16x16 output tile (16 input pixels of one image x 16 input channels)
// from zero with one TDPBF16PS per (tap, 32 output channels), in each of several orders. An order with no
// differing output is one a kernel of our own could keep and give the primitive's bits.
//
//   bwd_data_order     (built and run by bench/amx_probe/run.sh)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "amx_tiles.h"
#include "conv_probe.h"

namespace {

using amx_probe::TileConfig;
using amx_probe::ToBf16;

constexpr long kTaps = 9;

using Shape = amx_probe::ConvShape;
constexpr Shape kShapes[] = {{"layer1", 64, 64, 64, 28, 28, 1},          {"layer2", 64, 128, 128, 14, 14, 1},
                             {"layer3", 64, 256, 256, 7, 7, 1},          {"layer4", 64, 512, 512, 4, 4, 1},
                             {"layer4, 3 images", 3, 512, 512, 4, 4, 1}, {"layer2.0", 64, 64, 128, 28, 28, 2},
                             {"layer3.0", 64, 128, 256, 14, 14, 2},      {"layer4.0", 64, 256, 512, 7, 7, 2}};

// One step of the reduction: tap t (ky * 3 + kx of the forward kernel) and output channels [o0, o0 + 32).
using Step = std::pair<int, int>;

// gx [n, h, w, c] (float32) from gy [n, oh, ow, out] and w [out, c, 3, 3] (bf16), every 16x16 tile of an
// image's gx (16 pixels in row-major order x 16 channels) summed over `order` from zero. Taps that reach no
// output pixel (outside the output, or between a stride's pixels) multiply zero rows.
__attribute__((target("amx-tile,amx-bf16"))) void ReferenceInputGradient(const Shape& s,
                                                                         const std::vector<uint16_t>& gy,
                                                                         const std::vector<uint16_t>& w,
                                                                         const std::vector<Step>& order,
                                                                         std::vector<float>& gx) {
  const TileConfig config = amx_probe::SixteenRowTiles(3);
  _tile_loadconfig(&config);
  // b[t][c / 16][o / 2][16 c][2]: w[o, c, t] pair-interleaved for TDPBF16PS.
  std::vector<uint16_t> b(kTaps * s.c * s.out);
  for (long t = 0; t < kTaps; ++t) {
    for (long o = 0; o < s.out; ++o) {
      for (long c = 0; c < s.c; ++c) {
        const long block = (t * (s.c / 16) + c / 16) * s.out * 16;
        b[block + (o / 2) * 32 + (c % 16) * 2 + o % 2] = w[(o * s.c + c) * kTaps + t];
      }
    }
  }
  const long pixels = s.h * s.w, padded = (pixels + 15) / 16 * 16;
  std::vector<uint16_t> a(kTaps * padded * s.out);  // per tap: the gy rows each pixel reads, or zeros
  std::vector<float> tile(16 * 16);
  for (long i = 0; i < s.n; ++i) {
    std::fill(a.begin(), a.end(), 0);
    for (long t = 0; t < kTaps; ++t) {
      const long ky = t / 3, kx = t % 3;
      for (long p = 0; p < pixels; ++p) {
        const long sy = p / s.w + 1 - ky, sx = p % s.w + 1 - kx;  // stride x the output pixel reading p
        if (sy < 0 || sx < 0 || sy % s.stride != 0 || sx % s.stride != 0) continue;
        const long oy = sy / s.stride, ox = sx / s.stride;
        if (oy >= s.oh() || ox >= s.ow()) continue;
        std::memcpy(&a[(t * padded + p) * s.out], &gy[((i * s.oh() + oy) * s.ow() + ox) * s.out], s.out * 2);
      }
    }
    for (long p0 = 0; p0 < pixels; p0 += 16) {
      for (long c0 = 0; c0 < s.c; c0 += 16) {
        _tile_zero(0);
        for (const Step& step : order) {
          _tile_loadd(1, &a[(step.first * padded + p0) * s.out + step.second], s.out * 2);
          _tile_loadd(2, &b[(step.first * (s.c / 16) + c0 / 16) * s.out * 16 + (step.second / 2) * 32], 64);
          _tile_dpbf16ps(0, 1, 2);
        }
        _tile_stored(0, tile.data(), 64);
        for (long p = p0; p < std::min(pixels, p0 + 16); ++p)
          std::memcpy(&gx[(i * pixels + p) * s.c + c0], &tile[(p - p0) * 16], 64);
      }
    }
  }
  _tile_release();
}

// Orders over (tap, 32 output channels): output channels in blocks of `block` outside the taps (32: each
// chunk of 32 through all taps before the next), the taps in the forward's order or reversed.
std::vector<Step> Order(long out, long block, bool reversed) {
  std::vector<Step> order;
  for (long b0 = 0; b0 < out; b0 += block) {
    for (int t = 0; t < kTaps; ++t) {
      for (long o0 = b0; o0 < b0 + block; o0 += 32)
        order.push_back({reversed ? 8 - t : t, static_cast<int>(o0)});
    }
  }
  return order;
}

// oneDNN's backward-data primitive on s, NHWC activations as the engine gives them; returns its name.
std::string OneDnnInputGradient(const Shape& s, const std::vector<uint16_t>& gy,
                                const std::vector<uint16_t>& w, std::vector<float>& gx) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::dims src = s.src(), wei = s.weights(), dst = s.dst(), strides = s.strides(),
                           padding = s.padding();
  const dnnl::memory::desc wei_md(wei, dt::bf16, tag::any);
  const dnnl::convolution_forward::primitive_desc fwd = amx_probe::ForwardHint(s, engine);
  const dnnl::memory::desc gx_md(src, dt::f32, tag::acdb), gy_md(dst, dt::bf16, tag::acdb);
  const dnnl::convolution_backward_data::primitive_desc bwd(
      dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, gx_md, wei_md, gy_md,
                                            strides, padding, padding),
      engine, fwd);
  dnnl::memory w_user({wei, dt::bf16, tag::oihw}, engine, const_cast<uint16_t*>(w.data()));
  dnnl::memory w_mem(bwd.weights_desc(), engine);
  dnnl::reorder(w_user, w_mem).execute(stream, w_user, w_mem);
  dnnl::memory gy_mem(gy_md, engine, const_cast<uint16_t*>(gy.data())), gx_mem(gx_md, engine, gx.data());
  dnnl::convolution_backward_data(bwd).execute(
      stream, {{DNNL_ARG_DIFF_DST, gy_mem}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_DIFF_SRC, gx_mem}});
  stream.wait();
  return bwd.impl_info_str();
}

}  // namespace

int main() {
  if (!amx_probe::RequestTileData()) {
    std::printf("bwd_data_order: the kernel does not grant AMX tile data (arch_prctl); nothing to compare\n");
    return 0;
  }
  for (const Shape& s : kShapes) {
    std::mt19937 gen(5);
    std::normal_distribution<float> normal;
    std::vector<uint16_t> gy(s.n * s.oh() * s.ow() * s.out), w(s.out * s.c * kTaps);
    for (uint16_t& v : gy) v = ToBf16(normal(gen));
    for (uint16_t& v : w) v = ToBf16(0.05f * normal(gen));
    std::vector<float> theirs(s.n * s.h * s.w * s.c), ours(theirs.size());
    const std::string impl = OneDnnInputGradient(s, gy, w, theirs);
    for (long block : {32L, 64L, s.out}) {
      for (bool reversed : {false, true}) {
        ReferenceInputGradient(s, gy, w, Order(s.out, block, reversed), ours);
        long differ = 0;
        for (size_t i = 0; i < ours.size(); ++i) differ += std::memcmp(&ours[i], &theirs[i], 4) != 0;
        std::printf(
            "%-17s %d->%d %ldx%ld oneDNN %s; channels in blocks of %3ld outside the taps, taps %s: "
            "%ld of %zu outputs differ\n",
            s.name, static_cast<int>(s.out), static_cast<int>(s.c), s.h, s.w, impl.c_str(), block,
            reversed ? "reversed" : "in order", differ, ours.size());
      }
    }
  }
  return 0;
}
