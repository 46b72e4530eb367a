// In which order oneDNN 2.6's AMX matmul sums a bf16 GEMM's products, at the shapes the engine's bf16
// convolutions give it (tensor/conv_kernels.cc, tensor/conv_channels_last.cc): each shape is multiplied by
// oneDNN's matmul and by a reference AMX kernel that accumulates every 16x16 output tile over K, 32
// products at a time (one TDPBF16PS per step), in chunks of `chunk` such steps, each chunk from zero and
// then added to the chunks before it (Note [The K chunks of oneDNN's AMX matmul], tensor/amx_matmul_order.h);
// for chunk sizes from all of K (K in order) down to one step, the outputs whose float32 bits differ are
// counted, and the largest chunk under which none differ is printed. A convolution kernel of our own on
// AMX that keeps that order computes the bits of the engine's im2col + matmul path. Random bf16 operands
// (fixed seed).
//
//   sum_order          (built and run by bench/amx_probe/run.sh)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <vector>

#include "amx_tiles.h"

namespace {

using amx_probe::TileConfig;
using amx_probe::ToBf16;

// C[m, n] = A[m, K] B[K, n] (row-major; bf16 operands, float32 C) with every 16x16 tile of C accumulated
// over K in order. REQUIRES: m and n multiples of 16, K a multiple of 32.
__attribute__((target("amx-tile,amx-bf16"))) void ChunkedKAmxTiles(const uint16_t* a, const uint16_t* b,
                                                                   long m, long n, long k, long chunk,
                                                                   float* c) {
  const TileConfig config = amx_probe::SixteenRowTiles(3);
  _tile_loadconfig(&config);
  std::vector<uint16_t> panel(static_cast<size_t>(k) * 16);  // 16 columns of B, pairs of K interleaved
  for (long n0 = 0; n0 < n; n0 += 16) {
    for (long kk = 0; kk < k; ++kk) {
      for (int j = 0; j < 16; ++j) panel[(kk / 2) * 32 + j * 2 + kk % 2] = b[kk * n + n0 + j];
    }
    for (long m0 = 0; m0 < m; m0 += 16) {
      float sum[256], part[256];
      for (long first = 0; first < k; first += 32 * chunk) {
        _tile_zero(0);
        for (long k0 = first; k0 < std::min(k, first + 32 * chunk); k0 += 32) {
          _tile_loadd(1, a + m0 * k + k0, k * 2);
          _tile_loadd(2, panel.data() + (k0 / 2) * 32, 64);
          _tile_dpbf16ps(0, 1, 2);
        }
        _tile_stored(0, part, 64);
        for (int e = 0; e < 256; ++e) sum[e] = first == 0 ? part[e] : sum[e] + part[e];
      }
      for (int r = 0; r < 16; ++r) std::memcpy(c + (m0 + r) * n + n0, sum + r * 16, 64);
    }
  }
  _tile_release();
}

// ChunkedKAmxTiles for any m and n: the operands padded with zeros to multiples of 16 (a zero row or
// column adds nothing to the outputs that are kept). REQUIRES: K a multiple of 32.
void ChunkedKAmx(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, long m, long n, long k,
                 long chunk, std::vector<float>& c) {
  const long mp = (m + 15) / 16 * 16, np = (n + 15) / 16 * 16;
  std::vector<uint16_t> ap(mp * k, 0), bp(k * np, 0);
  std::copy(a.begin(), a.end(), ap.begin());
  for (long kk = 0; kk < k; ++kk)
    std::copy(b.begin() + kk * n, b.begin() + (kk + 1) * n, bp.begin() + kk * np);
  std::vector<float> cp(mp * np);
  ChunkedKAmxTiles(ap.data(), bp.data(), mp, np, k, chunk, cp.data());
  for (long i = 0; i < m; ++i) std::copy(cp.begin() + i * np, cp.begin() + i * np + n, c.begin() + i * n);
}

struct Shape {
  const char* name;
  long m, n, k;
  bool b_transposed;  // B stored as [n, K] (the weights in the channels-last forward), else as [K, n]
};

// The engine's forward GEMMs (ResNet-18 on 28x28 images, batch 64), with the image groups the engine uses:
// the NCHW forward multiplies the weights [out, K] by one group's im2col columns [K, pixels]
// (ImagesPerGroup in tensor/conv_kernels.cc: 1, 1, 5 and 32 images); the channels-last forward multiplies
// one group's unfolded rows [pixels, K] by the weights, stored [out, K] (ImagesPerRowGroup in
// tensor/conv_channels_last.cc: 2, 4, 9 and 14 images).
constexpr Shape kShapes[] = {{"NCHW forward layer1", 64, 784, 576, false},
                             {"NCHW forward layer2", 128, 196, 1152, false},
                             {"NCHW forward layer3", 256, 245, 2304, false},
                             {"NCHW forward layer4", 512, 512, 4608, false},
                             {"channels-last forward layer1", 1568, 64, 576, true},
                             {"channels-last forward layer2", 784, 128, 1152, true},
                             {"channels-last forward layer3", 441, 256, 2304, true},
                             {"channels-last forward layer4", 224, 512, 4608, true}};

}  // namespace

int main() {
  if (!amx_probe::RequestTileData()) {
    std::printf("sum_order: the kernel does not grant AMX tile data (arch_prctl); nothing to compare\n");
    return 0;
  }
  using dt = dnnl::memory::data_type;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  for (const Shape& s : kShapes) {
    std::mt19937 gen(3);
    std::normal_distribution<float> normal;
    std::vector<uint16_t> a(s.m * s.k), b(s.k * s.n);
    for (uint16_t& v : a) v = ToBf16(normal(gen));
    for (uint16_t& v : b) v = ToBf16(0.05f * normal(gen));
    std::vector<uint16_t> b_stored = b;  // as oneDNN is given it
    if (s.b_transposed) {
      for (long kk = 0; kk < s.k; ++kk) {
        for (long j = 0; j < s.n; ++j) b_stored[j * s.k + kk] = b[kk * s.n + j];
      }
    }
    std::vector<float> ours(s.m * s.n), theirs(s.m * s.n);
    const dnnl::memory::dims b_strides =
        s.b_transposed ? dnnl::memory::dims{1, s.k} : dnnl::memory::dims{s.n, 1};
    const dnnl::memory::desc a_md({s.m, s.k}, dt::bf16, {s.k, 1}), b_md({s.k, s.n}, dt::bf16, b_strides),
        c_md({s.m, s.n}, dt::f32, {s.n, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
    dnnl::memory a_mem(a_md, engine, a.data()), b_mem(b_md, engine, b_stored.data()),
        c_mem(c_md, engine, theirs.data());
    dnnl::matmul(pd).execute(stream,
                             {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    stream.wait();
    long in_order = 0, found = 0;
    for (long chunk = s.k / 32; chunk >= 1 && found == 0; --chunk) {
      ChunkedKAmx(a, b, s.m, s.n, s.k, chunk, ours);
      long differ = 0;
      for (size_t i = 0; i < ours.size(); ++i) differ += std::memcmp(&ours[i], &theirs[i], 4) != 0;
      if (chunk == s.k / 32) in_order = differ;
      if (differ == 0) found = chunk;
    }
    std::printf("%-34s m=%-4ld n=%-4ld k=%-4ld oneDNN %s: %ld of %zu outputs differ from K in order; ",
                s.name, s.m, s.n, s.k, pd.impl_info_str(), in_order, ours.size());
    if (found == 0) std::printf("no chunk size gives every bit\n");
    if (found > 0) std::printf("every bit with chunks of %ld steps (%ld of K)\n", found, found * 32);
  }
  return 0;
}
