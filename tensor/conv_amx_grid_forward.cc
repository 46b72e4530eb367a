// The channels-last bf16 forward on AMX tiles along the padded grid (contracts:
// tensor/conv_amx_grid_forward.h; Note [Channels-last forward on AMX tiles along the padded grid] there).
#include "tensor/conv_amx_grid_forward.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "tensor/amx_matmul_order.h"
#include "tensor/amx_tiles.h"
#include "tensor/layout_transpose.h"

namespace ddp {
namespace cpu {
namespace {

constexpr int64_t kTile = 16;       // grid positions (tile rows) and output channels (tile columns) per tile
constexpr int64_t kTileK = 32;      // products per TDPBF16PS
constexpr int64_t kOutBlock = 128;  // output channels whose packed weights stay in L2 while the images pass
constexpr int64_t kSums = 4 * kTile * kTile;  // the four accumulators' floats

// taps_first [out, K] as B operands: for each block of 16 output channels, K in pairs, each pair's two
// values side by side for each of the 16 channels ([out / 16][K / 2][16][2]). A pair of bf16 is 32 bits,
// so per block that is the transpose of 16 rows of K / 2 pairs, done as one of 32-bit floats (bits moved,
// none read as numbers).
void PackTapsFirst(const BFloat16* taps_first, int64_t out, int64_t K, BFloat16* packed) {
  static_assert(2 * sizeof(BFloat16) == sizeof(float), "a pair of bf16 is one float's bits");
  Transpose32(reinterpret_cast<const float*>(taps_first), out / kTile, kTile, K / 2,
              reinterpret_cast<float*>(packed));
}

// One image [h, w, c] (channels-last) into `padded`: (h + 2) rows of (w + 1) pixels, a zero pixel first in
// each row and the image's row after it, the first and last rows zeros, and one more zero pixel at the end.
// A row's zero pixel is also the padding right of the row before: the pixel right of (yy, w) is (yy + 1, 0)
// in this layout.
void PadSharingColumns(const BFloat16* image, int64_t h, int64_t w, int64_t c, BFloat16* padded) {
  const int64_t row = (w + 1) * c;
  std::memset(static_cast<void*>(padded), 0, sizeof(BFloat16) * row);
  for (int64_t y = 0; y < h; ++y) {
    BFloat16* dst = padded + (y + 1) * row;
    std::memset(static_cast<void*>(dst), 0, sizeof(BFloat16) * c);
    std::memcpy(static_cast<void*>(dst + c), image + y * w * c, sizeof(BFloat16) * w * c);
  }
  std::memset(static_cast<void*>(padded + (h + 1) * row), 0, sizeof(BFloat16) * (row + c));
}

// Two images (or one) sharing their tiles, and the K chunk their GEMMs sum in.
struct ImagePair {
  int64_t first;
  bool two;
  int64_t chunk_blocks;
};

// Tiles 0-1 accumulate the first image's positions against two tiles of 16 output channels, 2-3 the
// second image's; 4 and 5 hold the two images' A operands (`rows` positions x 32 K), 6 and 7 the B
// operands (16 K pairs x 16 output channels).
AmxTileConfig PairConfig(int64_t rows) {
  AmxTileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = static_cast<uint8_t>(t < 6 ? rows : kTile);
    config.bytes_per_row[t] = 64;
  }
  return config;
}

// The four accumulators into `sums` ([4][16][16]) at the end of a K chunk: written by the first chunk,
// added to by each later one (float32, in chunk order).
__attribute__((target("amx-tile,amx-bf16"))) void EndChunk(bool first_chunk, float* sums, float* chunk) {
  float* dst = first_chunk ? sums : chunk;
  _tile_stored(0, dst, kTile * 4);
  _tile_stored(1, dst + kTile * kTile, kTile * 4);
  _tile_stored(2, dst + 2 * kTile * kTile, kTile * 4);
  _tile_stored(3, dst + 3 * kTile * kTile, kTile * 4);
  if (!first_chunk) {
    for (int64_t e = 0; e < kSums; ++e) sums[e] += chunk[e];
  }
}

// The rows of `sums` for grid positions [q0, q0 + rows) of image `image` (0 or 1 of the pair) into y [oh,
// ow, out] at output channel o0, the positions past an output row dropped.
void StorePositions(const float* sums, int image, int64_t q0, int64_t rows, int64_t o0, const ConvGeometry& g,
                    float* y) {
  const int64_t wp = g.w + 1;
  const float* left = sums + 2 * image * kTile * kTile;
  const float* right = left + kTile * kTile;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t oy = (q0 + r) / wp, ox = (q0 + r) % wp;
    if (ox >= g.ow) continue;
    float* dst = y + (oy * g.ow + ox) * g.out + o0;
    std::memcpy(dst, left + r * kTile, kTile * sizeof(float));
    std::memcpy(dst + kTile, right + r * kTile, kTile * sizeof(float));
  }
}

// Output channels [o_begin, o_end) of a pair of images: y (the first image's [oh, ow, out]) from their
// padded inputs (the second padded_image elements after the first) and the packed weights. Each tile of
// 16 grid positions, for each 32 output channels, sums K = (ky, kx, c) in 32-wide blocks, chunk_blocks
// blocks from zero at a time.
__attribute__((target("amx-tile,amx-bf16"))) void PairForward(const BFloat16* padded, int64_t padded_image,
                                                              const BFloat16* packed, const ConvGeometry& g,
                                                              int64_t o_begin, int64_t o_end,
                                                              const ImagePair& pair, float* y) {
  const int64_t wp = g.w + 1, positions = (g.oh - 1) * wp + g.ow, a_stride = g.c * 2;
  const int64_t block = g.K() * kTile;  // packed elements per 16 output channels
  alignas(64) float sums[kSums], chunk[kSums];
  for (int64_t q0 = 0; q0 < positions; q0 += kTile) {
    const int64_t rows = std::min(kTile, positions - q0);
    const AmxTileConfig config = PairConfig(rows);
    _tile_loadconfig(&config);
    for (int64_t o0 = o_begin; o0 < o_end; o0 += 2 * kTile) {
      const BFloat16* b0 = packed + (o0 / kTile) * block;
      int64_t blocks_in_chunk = 0;
      bool first_chunk = true;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t t = 0; t < 9; ++t) {
        const BFloat16* a = padded + (q0 + (t / 3) * wp + t % 3) * g.c;
        const BFloat16* b = b0 + t * g.c * kTile;
        for (int64_t c0 = 0; c0 < g.c; c0 += kTileK) {
          if (blocks_in_chunk == pair.chunk_blocks) {
            EndChunk(first_chunk, sums, chunk);
            first_chunk = false;
            blocks_in_chunk = 0;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
          }
          ++blocks_in_chunk;
          _tile_loadd(4, a + c0, a_stride);
          _tile_loadd(6, b + c0 * kTile, 64);
          _tile_dpbf16ps(0, 4, 6);
          _tile_loadd(7, b + block + c0 * kTile, 64);
          _tile_dpbf16ps(1, 4, 7);
          if (!pair.two) continue;
          _tile_loadd(5, a + padded_image + c0, a_stride);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      EndChunk(first_chunk, sums, chunk);
      StorePositions(sums, 0, q0, rows, o0, g, y);
      if (pair.two) StorePositions(sums, 1, q0, rows, o0, g, y + g.P() * g.out);
    }
  }
  _tile_release();
}

// The pairs of images [begin, end), all summing in chunks of chunk_blocks.
void AddPairs(int64_t begin, int64_t end, int64_t chunk_blocks, std::vector<ImagePair>& pairs) {
  for (int64_t i = begin; i < end; i += 2) pairs.push_back({i, i + 1 < end, chunk_blocks});
}

}  // namespace

bool AmxGridForwardComputes(const ConvGeometry& g) {
  return g.channels_last && g.kh == 3 && g.kw == 3 && g.padding == 1 && g.stride == 1 && g.c % kTileK == 0 &&
         g.out % (2 * kTile) == 0 && AmxTileDataGranted();
}

int64_t AmxGridForwardChannelsLast(const BFloat16* x, const BFloat16* taps_first, const ConvGeometry& g,
                                   int64_t images_per_gemm, float* y) {
  DDP_CHECK(AmxGridForwardComputes(g) && images_per_gemm >= 1)
      << "AmxGridForwardChannelsLast: no AMX kernel for this convolution (c " << g.c << ", out " << g.out
      << ", " << g.kh << "x" << g.kw << ", stride " << g.stride << ", padding " << g.padding
      << ", images per GEMM " << images_per_gemm << ")";
  if (g.n <= 0) return 0;
  const int64_t K = g.K(), P = g.P(), group = std::min(images_per_gemm, g.n), full = g.n / group * group;
  const int64_t full_chunk = AmxMatmulChunkBlocks(group * P, g.out, K);
  if (full_chunk == 0) return 0;
  std::vector<ImagePair> pairs;
  AddPairs(0, full, full_chunk, pairs);
  int64_t done = full;
  if (full < g.n) {
    const int64_t last_chunk = AmxMatmulChunkBlocks((g.n - full) * P, g.out, K);
    if (last_chunk > 0) {
      AddPairs(full, g.n, last_chunk, pairs);
      done = g.n;
    }
  }
  thread_local std::vector<BFloat16> packed_weights, padded_inputs;  // the calling thread's, shared
  BFloat16* packed = AlignedScratch(packed_weights, g.out * K);
  PackTapsFirst(taps_first, g.out, K, packed);
  const int64_t image = g.h * g.w * g.c, padded_image = ((g.h + 2) * (g.w + 1) + 1) * g.c;
  BFloat16* padded = AlignedScratch(padded_inputs, done * padded_image);
#pragma omp parallel for if (done > 1)
  for (int64_t i = 0; i < done; ++i)
    PadSharingColumns(x + i * image, g.h, g.w, g.c, padded + i * padded_image);
  const int64_t count = static_cast<int64_t>(pairs.size());
#pragma omp parallel if (count > 1)
  for (int64_t o_begin = 0; o_begin < g.out; o_begin += kOutBlock) {
    const int64_t o_end = std::min(g.out, o_begin + kOutBlock);
#pragma omp for schedule(static)
    for (int64_t j = 0; j < count; ++j) {
      const ImagePair& pair = pairs[j];
      PairForward(padded + pair.first * padded_image, padded_image, packed, g, o_begin, o_end, pair,
                  y + pair.first * P * g.out);
    }
  }
  return done;
}

}  // namespace cpu
}  // namespace ddp
