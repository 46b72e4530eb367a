// The K chunks of oneDNN's AMX matmul, asked of it (contracts: tensor/amx_matmul_order.h; Note [The K
// chunks of oneDNN's AMX matmul] there).
#include "tensor/amx_matmul_order.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "tensor/amx_tiles.h"
#include "tensor/bf16_convert.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/threads.h"

namespace ddp {
namespace cpu {
namespace {

constexpr int64_t kTile = 16;   // tile rows and float32 columns
constexpr int64_t kTileK = 32;  // products per TDPBF16PS

std::vector<BFloat16> RandomBf16(int64_t count, std::mt19937& gen) {
  std::normal_distribution<float> normal;
  std::vector<float> values(count);
  for (float& v : values) v = normal(gen);
  std::vector<BFloat16> out(count);
  FloatToBFloat16Array(values.data(), out.data(), count);
  return out;
}

// Columns [j0, j0 + 16) of B stored [n, K] as the panel AmxChunkedTile takes.
std::vector<BFloat16> PanelOf(const std::vector<BFloat16>& b, int64_t K, int64_t j0) {
  std::vector<BFloat16> panel(K * kTile);
  for (int64_t j = 0; j < kTile; ++j) {
    for (int64_t k = 0; k < K; ++k) panel[(k / 2) * 2 * kTile + j * 2 + k % 2] = b[(j0 + j) * K + k];
  }
  return panel;
}

// A 16x16 (or fewer rows) tile of C = A B^T: its top-left corner and its rows.
struct TileAt {
  int64_t row, col, rows;
};

// The largest chunk size (in 32-wide blocks) under which AmxChunkedTile gives every bit of three output
// tiles of Gemm(false, true, m, n, K, ...) on a pseudo-random problem of that shape (the first tile, one in
// the middle, the last); 0 where none does.
int64_t FindChunkBlocks(int64_t m, int64_t n, int64_t K) {
  std::mt19937 gen(20261207);
  const std::vector<BFloat16> a = RandomBf16(m * K, gen), b = RandomBf16(n * K, gen);
  std::vector<float> c(m * n);
  Gemm(false, true, m, n, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), n);
  const int64_t rows = std::min(kTile, m);
  const TileAt tiles[3] = {
      {0, 0, rows}, {(m - rows) / 2, (n - kTile) / 2, rows}, {m - rows, n - kTile, rows}};
  std::vector<BFloat16> panels[3];
  for (int t = 0; t < 3; ++t) panels[t] = PanelOf(b, K, tiles[t].col);
  std::vector<float> ours(kTile * kTile);
  for (int64_t chunk = K / kTileK; chunk >= 1; --chunk) {
    bool same = true;
    for (int t = 0; t < 3 && same; ++t) {
      const TileAt& at = tiles[t];
      AmxChunkedTile(a.data() + at.row * K, K, at.rows, K, panels[t].data(), chunk, ours.data(), kTile);
      for (int64_t r = 0; r < at.rows && same; ++r) {
        same = std::memcmp(ours.data() + r * kTile, c.data() + (at.row + r) * n + at.col, kTile * 4) == 0;
      }
    }
    if (same) return chunk;
  }
  return 0;
}

}  // namespace

__attribute__((target("amx-tile,amx-bf16"))) void AmxChunkedTile(const BFloat16* a, int64_t lda, int64_t rows,
                                                                 int64_t K, const BFloat16* panel,
                                                                 int64_t chunk_blocks, float* c,
                                                                 int64_t ldc) {
  AmxTileConfig config;
  config.rows[0] = config.rows[1] = static_cast<uint8_t>(rows);
  config.rows[2] = kTile;
  config.bytes_per_row[0] = config.bytes_per_row[1] = config.bytes_per_row[2] = 64;
  _tile_loadconfig(&config);
  alignas(64) float chunk_sum[kTile * kTile];
  const int64_t blocks = K / kTileK;
  for (int64_t first = 0; first < blocks; first += chunk_blocks) {
    _tile_zero(0);
    for (int64_t kb = first; kb < std::min(blocks, first + chunk_blocks); ++kb) {
      _tile_loadd(1, a + kb * kTileK, lda * 2);
      _tile_loadd(2, panel + kb * kTileK * kTile, 64);
      _tile_dpbf16ps(0, 1, 2);
    }
    _tile_stored(0, chunk_sum, kTile * 4);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = c + r * ldc;
      for (int64_t j = 0; j < kTile; ++j)
        row[j] = first == 0 ? chunk_sum[r * kTile + j] : row[j] + chunk_sum[r * kTile + j];
    }
  }
  _tile_release();
}

int64_t AmxMatmulChunkBlocks(int64_t m, int64_t n, int64_t K) {
  if (m < 1 || n < kTile || K < kTileK || K % kTileK != 0 || !AmxTileDataGranted()) return 0;
  if (!GemmOnAmxBrgemm(false, true, m, n, K, K, K, n, false)) return 0;
  // Per thread, as the GEMM plans of tensor/cpu_gemm_bf16.cc.
  thread_local std::map<std::tuple<int64_t, int64_t, int64_t, int>, int64_t> found;
  const auto key = std::make_tuple(m, n, K, GetNumThreads());
  auto it = found.find(key);
  if (it == found.end()) it = found.emplace(key, FindChunkBlocks(m, n, K)).first;
  return it->second;
}

}  // namespace cpu
}  // namespace ddp
