// In which order the engine's channels-last bf16 weight gradient on the unfolded rows (WeightGradient in
// tensor/conv_channels_last.cc) sums its products on oneDNN 2.6's AMX matmul, at ResNet-18's 3x3 shapes whose
// weight gradients take that path (output maps of at most 64 pixels, batch 64): gw [out, K] = Σ over groups
// of images of gy_rows^T [out, m] x rows [m, K], the first group's GEMM writing gw and each later one adding
// into it (oneDNN's sum post-op), exactly as the engine calls it. The result is compared bit for bit with
// AMX references that sum each 16x16 tile of gw over a group's m in order, 32 products per TDPBF16PS (the
// tail padded with zeros), and either add the group's tile to the sum so far ("group then add") or start
// the tile from the sum so far ("accumulate onto"). An order with no differing output is one a kernel of our
// own could keep and give the engine's bits. Random bf16 operands (fixed seed).
//
//   wgrad_order        (built and run by bench/amx_probe/run.sh)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <vector>

#include "amx_tiles.h"

namespace {

using amx_probe::TileConfig;
using amx_probe::ToBf16;

// One weight gradient: out x K outputs, pixels per image, images per group (ImagesPerRowGroup for bf16 rows).
struct Shape {
  const char* name;
  long out, k, pixels, n;
  long group() const { return std::clamp<long>((2l << 20) / (pixels * k * 2), 1, n); }
};
constexpr Shape kShapes[] = {
    {"layer3, 28x28 images", 256, 2304, 49, 64},    {"layer3.0, 28x28", 256, 1152, 49, 64},
    {"layer4, 28x28 and 32x32", 512, 4608, 16, 64}, {"layer4.0, 28x28 and 32x32", 512, 2304, 16, 64},
    {"layer3, 32x32 images", 256, 2304, 64, 64},    {"layer3.0, 32x32", 256, 1152, 64, 64},
    {"layer4, 3 images", 512, 4608, 16, 3}};

// gw as the engine computes it: one oneDNN matmul per group, A = gy transposed (stored [m, out]).
// Returns oneDNN's name for the matmul it ran.
std::string EngineWeightGradient(const Shape& s, const std::vector<uint16_t>& gy,
                                 const std::vector<uint16_t>& rows, std::vector<float>& gw) {
  using dt = dnnl::memory::data_type;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  std::string implementation;
  for (long first = 0; first < s.n; first += s.group()) {
    const long m = std::min(s.group(), s.n - first) * s.pixels, p0 = first * s.pixels;
    const dnnl::memory::desc a_md({s.out, m}, dt::bf16, {1, s.out}), b_md({m, s.k}, dt::bf16, {s.k, 1}),
        c_md({s.out, s.k}, dt::f32, {s.k, 1});
    dnnl::primitive_attr attr;
    if (first > 0) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine);
    implementation = pd.impl_info_str();
    dnnl::memory a_mem(a_md, engine, const_cast<uint16_t*>(gy.data() + p0 * s.out)),
        b_mem(b_md, engine, const_cast<uint16_t*>(rows.data() + p0 * s.k)), c_mem(c_md, engine, gw.data());
    dnnl::matmul(pd).execute(stream,
                             {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    stream.wait();
  }
  return implementation;
}

// gw by AMX tiles: per group, each 16x16 tile summed over the group's pixels in order (zero-padded to 32);
// `onto`: the tile starts from the sum so far, else from zero and is then added to it.
__attribute__((target("amx-tile,amx-bf16"))) void ReferenceWeightGradient(const Shape& s,
                                                                          const std::vector<uint16_t>& gy,
                                                                          const std::vector<uint16_t>& rows,
                                                                          bool onto, std::vector<float>& gw) {
  const TileConfig config = amx_probe::SixteenRowTiles(3);
  _tile_loadconfig(&config);
  std::vector<float> tile(256);
  for (long first = 0; first < s.n; first += s.group()) {
    const long m = std::min(s.group(), s.n - first) * s.pixels, p0 = first * s.pixels;
    const long mp = (m + 31) / 32 * 32;
    // a[o][p]: gy transposed; b[p / 2][j][2]: rows pair-interleaved; both zero past m.
    std::vector<uint16_t> a(s.out * mp, 0), b(mp * s.k, 0);
    for (long p = 0; p < m; ++p) {
      for (long o = 0; o < s.out; ++o) a[o * mp + p] = gy[(p0 + p) * s.out + o];
    }
    for (long j0 = 0; j0 < s.k; j0 += 16) {
      std::vector<uint16_t> panel(mp * 16, 0);
      for (long p = 0; p < m; ++p) {
        for (int j = 0; j < 16; ++j) panel[(p / 2) * 32 + j * 2 + p % 2] = rows[(p0 + p) * s.k + j0 + j];
      }
      for (long o0 = 0; o0 < s.out; o0 += 16) {
        float* c = gw.data() + o0 * s.k + j0;
        if (onto && first > 0) {
          _tile_loadd(0, c, s.k * 4);
        } else {
          _tile_zero(0);
        }
        for (long k0 = 0; k0 < mp; k0 += 32) {
          _tile_loadd(1, a.data() + o0 * mp + k0, mp * 2);
          _tile_loadd(2, panel.data() + (k0 / 2) * 32, 64);
          _tile_dpbf16ps(0, 1, 2);
        }
        if (onto || first == 0) {
          _tile_stored(0, c, s.k * 4);
          continue;
        }
        _tile_stored(0, tile.data(), 64);
        for (int r = 0; r < 16; ++r) {
          for (int j = 0; j < 16; ++j) c[r * s.k + j] += tile[r * 16 + j];
        }
      }
    }
  }
  _tile_release();
}

long Differing(const std::vector<float>& x, const std::vector<float>& y) {
  long differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += std::memcmp(&x[i], &y[i], 4) != 0;
  return differ;
}

}  // namespace

int main() {
  if (!amx_probe::RequestTileData()) {
    std::printf("wgrad_order: the kernel does not grant AMX tile data (arch_prctl); nothing to compare\n");
    return 0;
  }
  for (const Shape& s : kShapes) {
    std::mt19937 gen(5);
    std::normal_distribution<float> normal;
    const long total = s.n * s.pixels;
    std::vector<uint16_t> gy(total * s.out), rows(total * s.k);
    for (uint16_t& v : gy) v = ToBf16(0.01f * normal(gen));
    for (uint16_t& v : rows) v = ToBf16(normal(gen));
    std::vector<float> engine(s.out * s.k), added(s.out * s.k), onto(s.out * s.k);
    const std::string implementation = EngineWeightGradient(s, gy, rows, engine);
    ReferenceWeightGradient(s, gy, rows, false, added);
    ReferenceWeightGradient(s, gy, rows, true, onto);
    std::printf(
        "%-26s out=%-3ld K=%-4ld %ld px/group x %ld groups, oneDNN %s: of %zu outputs %ld differ from "
        "group then add, %ld from accumulate onto\n",
        s.name, s.out, s.k, s.group() * s.pixels, (s.n + s.group() - 1) / s.group(), implementation.c_str(),
        engine.size(), Differing(engine, added), Differing(engine, onto));
  }
  return 0;
}
