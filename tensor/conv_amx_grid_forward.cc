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
// Output rows (pixels) up to which the one-row kernel's tiles would run at most half full, where the engine
// prefers this kernel (AmxGridForwardPreferred).
constexpr int64_t kMaxPreferredRow = kTile / 2;

// taps_first [out, K] as B operands: for each block of 16 output channels, K in pairs, each pair's two
// values side by side for each of the 16 channels ([out / 16][K / 2][16][2]). A pair of bf16 is 32 bits,
// so per block that is the transpose of 16 rows of K / 2 pairs, done as one of 32-bit floats (bits moved,
// none read as numbers).
void PackTapsFirst(const BFloat16* taps_first, int64_t out, int64_t K, BFloat16* packed) {
  static_assert(2 * sizeof(BFloat16) == sizeof(float), "a pair of bf16 is one float's bits");
  Transpose32(reinterpret_cast<const float*>(taps_first), out / kTile, kTile, K / 2,
              reinterpret_cast<float*>(packed));
}

// How one image's input lies along the grid (Note [Channels-last forward on AMX tiles along the padded
// grid]): the elements it takes, and for each tap where grid position 0 reads, in elements from the image's
// start (position q reads q * c further), and how many positions wide the grid is: ow + 1 along the padded
// grid, ow along column-shifted copies.
struct GridLayout {
  int64_t image_elements = 0;
  int64_t tap_start[9] = {};
  int64_t width = 0;
};

// Tiles of 16 positions an image's grid takes at the given width.
int64_t PositionTiles(const ConvGeometry& g, int64_t width) {
  return ((g.oh - 1) * width + g.ow + kTile - 1) / kTile;
}

// Whether an image goes along column-shifted copies (below) rather than the padded grid: at stride 1, where
// that takes at most two thirds of the grid's tiles of positions. A tile of a few rows costs most of a full
// one, so a 4x4 map's 16 positions in one tile against 19 in two save a third of the time (layer4, Note
// [Channels-last forward on AMX tiles along the padded grid]); an 8x8 map's 4 tiles against 5 measured
// slower, the three copies of each image being larger than the grid.
bool UsesShiftedCopies(const ConvGeometry& g) {
  return g.stride == 1 && 3 * PositionTiles(g, g.ow) <= 2 * PositionTiles(g, g.ow + 1);
}

// Stride 1: the image padded with zero rows above and below and one zero pixel before each row, (w + 1)
// wide, and one more zero pixel at the end; a row's zero pixel is also the padding right of the row above
// (the pixel right of (yy, w) is (yy + 1, 0)). Stride 2: four planes of (oh + 1) x (ow + 1) pixels, one per
// parity of the padded rows and columns (plane (py, px) holds padded pixel (2a + py, 2b + px) at (a, b),
// zeros outside the image), so that tap (ky, kx) reads plane (ky % 2, kx % 2) at (oy + ky / 2, ox + kx / 2),
// consecutive positions at stride c as at stride 1.
// Column-shifted copies (stride 1): for each tap column kx, a copy of the image padded with zero rows above
// and below, w wide, whose pixel (yy, x) is the input pixel (yy - 1, x + kx - 1) or zero outside the image;
// tap (ky, kx) reads copy kx at (oy + ky, ox), consecutive positions at stride c again, ow wide.
GridLayout LayoutFor(const ConvGeometry& g) {
  GridLayout layout;
  if (UsesShiftedCopies(g)) {
    const int64_t copy = (g.h + 2) * g.w * g.c;
    layout.image_elements = 3 * copy;
    for (int t = 0; t < 9; ++t) layout.tap_start[t] = (t % 3) * copy + (t / 3) * g.w * g.c;
    layout.width = g.ow;
    return layout;
  }
  const int64_t wp = g.ow + 1;
  layout.width = wp;
  if (g.stride == 1) {
    layout.image_elements = ((g.h + 2) * wp + 1) * g.c;
    for (int t = 0; t < 9; ++t) layout.tap_start[t] = ((t / 3) * wp + t % 3) * g.c;
  } else {
    const int64_t plane = (g.oh + 1) * wp * g.c;
    layout.image_elements = 4 * plane;
    for (int t = 0; t < 9; ++t) {
      const int ky = t / 3, kx = t % 3;
      layout.tap_start[t] = ((ky % 2) * 2 + kx % 2) * plane + ((ky / 2) * wp + kx / 2) * g.c;
    }
  }
  return layout;
}

// One image [h, w, c] (channels-last) laid out as LayoutFor(g) says, into `dst` (image_elements).
void LayOutImage(const BFloat16* image, const ConvGeometry& g, BFloat16* dst) {
  const int64_t c = g.c, wp = g.ow + 1;
  if (UsesShiftedCopies(g)) {
    const int64_t row = g.w * c;
    for (int64_t kx = 0; kx < 3; ++kx) {
      BFloat16* copy = dst + kx * (g.h + 2) * row;
      std::memset(static_cast<void*>(copy), 0, sizeof(BFloat16) * row);
      std::memset(static_cast<void*>(copy + (g.h + 1) * row), 0, sizeof(BFloat16) * row);
      for (int64_t y = 0; y < g.h; ++y) {
        BFloat16* out = copy + (y + 1) * row;
        const BFloat16* in = image + y * row;
        // Pixel x takes input pixel x + kx - 1: shifted right (kx = 0) or left (kx = 2) by one, a zero in
        // the pixel that falls outside.
        const int64_t first = kx == 0 ? 1 : 0, from = kx == 2 ? 1 : 0, pixels = kx == 1 ? g.w : g.w - 1;
        std::memcpy(static_cast<void*>(out + first * c), in + from * c, sizeof(BFloat16) * pixels * c);
        if (kx != 1)
          std::memset(static_cast<void*>(out + (kx == 0 ? 0 : g.w - 1) * c), 0, sizeof(BFloat16) * c);
      }
    }
    return;
  }
  if (g.stride == 1) {
    const int64_t row = wp * c;
    std::memset(static_cast<void*>(dst), 0, sizeof(BFloat16) * row);
    for (int64_t y = 0; y < g.h; ++y) {
      BFloat16* out = dst + (y + 1) * row;
      std::memset(static_cast<void*>(out), 0, sizeof(BFloat16) * c);
      std::memcpy(static_cast<void*>(out + c), image + y * g.w * c, sizeof(BFloat16) * g.w * c);
    }
    std::memset(static_cast<void*>(dst + (g.h + 1) * row), 0, sizeof(BFloat16) * (row + c));
    return;
  }
  for (int64_t py = 0; py < 2; ++py) {
    for (int64_t px = 0; px < 2; ++px) {
      BFloat16* plane = dst + (py * 2 + px) * (g.oh + 1) * wp * c;
      for (int64_t a = 0; a <= g.oh; ++a) {
        for (int64_t b = 0; b < wp; ++b) {
          const int64_t iy = 2 * a + py - 1, ix = 2 * b + px - 1;
          BFloat16* out = plane + (a * wp + b) * c;
          if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) {
            std::memset(static_cast<void*>(out), 0, sizeof(BFloat16) * c);
          } else {
            std::memcpy(static_cast<void*>(out), image + (iy * g.w + ix) * c, sizeof(BFloat16) * c);
          }
        }
      }
    }
  }
}

// Two images (or one) sharing their tiles, and the K chunk their GEMMs sum in.
struct ImagePair {
  int64_t first;
  bool two;
  int64_t chunk_blocks;
};

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

// The rows of `sums` for grid positions [q0, q0 + rows) of image `image` (0 or 1 of the pair; a grid wp
// positions wide) into y [oh, ow, out] at output channel o0, the positions past an output row dropped.
void StorePositions(const float* sums, int image, int64_t q0, int64_t rows, int64_t o0, const ConvGeometry& g,
                    int64_t wp, float* y) {
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
// inputs laid out along the grid (the second layout.image_elements after the first) and the packed weights.
// Each tile of 16 grid positions, for each 32 output channels, sums K = (ky, kx, c) in 32-wide blocks,
// chunk_blocks blocks from zero at a time.
__attribute__((target("amx-tile,amx-bf16"))) void PairForward(const BFloat16* laid_out,
                                                              const GridLayout& layout,
                                                              const BFloat16* packed, const ConvGeometry& g,
                                                              int64_t o_begin, int64_t o_end,
                                                              const ImagePair& pair, float* y) {
  const int64_t wp = layout.width, positions = (g.oh - 1) * wp + g.ow, a_stride = g.c * 2;
  const int64_t block = g.K() * kTile;  // packed elements per 16 output channels
  alignas(64) float sums[kSums], chunk[kSums];
  LoadedTileConfig loaded;
  for (int64_t q0 = 0; q0 < positions; q0 += kTile) {
    const int64_t rows = std::min(kTile, positions - q0);
    // Tiles 0-1: the first image's positions against two tiles of 16 output channels, 2-3 the second's.
    LoadTwoByTwoTileConfig(rows, rows, loaded);
    for (int64_t o0 = o_begin; o0 < o_end; o0 += 2 * kTile) {
      const BFloat16* b0 = packed + (o0 / kTile) * block;
      int64_t blocks_in_chunk = 0;
      bool first_chunk = true;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t t = 0; t < 9; ++t) {
        const BFloat16* a = laid_out + layout.tap_start[t] + q0 * g.c;
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
          _tile_loadd(5, a + layout.image_elements + c0, a_stride);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      EndChunk(first_chunk, sums, chunk);
      StorePositions(sums, 0, q0, rows, o0, g, wp, y);
      if (pair.two) StorePositions(sums, 1, q0, rows, o0, g, wp, y + g.P() * g.out);
    }
  }
  ReleaseTiles(loaded);
}

// The pairs of images [begin, end), all summing in chunks of chunk_blocks.
void AddPairs(int64_t begin, int64_t end, int64_t chunk_blocks, std::vector<ImagePair>& pairs) {
  for (int64_t i = begin; i < end; i += 2) pairs.push_back({i, i + 1 < end, chunk_blocks});
}

}  // namespace

bool AmxGridForwardComputes(const ConvGeometry& g) {
  return g.channels_last && g.kh == 3 && g.kw == 3 && g.padding == 1 && (g.stride == 1 || g.stride == 2) &&
         g.c % kTileK == 0 && g.out % (2 * kTile) == 0 && AmxTileDataGranted();
}

bool AmxGridForwardPreferred(const ConvGeometry& g) {
  return g.ow <= kMaxPreferredRow && AmxGridForwardComputes(g);
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
  thread_local std::vector<BFloat16> packed_weights, laid_out_inputs;  // the calling thread's, shared
  BFloat16* packed = AlignedScratch(packed_weights, g.out * K);
  PackTapsFirst(taps_first, g.out, K, packed);
  const GridLayout layout = LayoutFor(g);
  const int64_t image = g.h * g.w * g.c;
  BFloat16* laid_out = AlignedScratch(laid_out_inputs, done * layout.image_elements);
#pragma omp parallel for if (done > 1)
  for (int64_t i = 0; i < done; ++i) LayOutImage(x + i * image, g, laid_out + i * layout.image_elements);
  const int64_t count = static_cast<int64_t>(pairs.size());
#pragma omp parallel if (count > 1)
  for (int64_t o_begin = 0; o_begin < g.out; o_begin += kOutBlock) {
    const int64_t o_end = std::min(g.out, o_begin + kOutBlock);
#pragma omp for schedule(static)
    for (int64_t j = 0; j < count; ++j) {
      const ImagePair& pair = pairs[j];
      PairForward(laid_out + pair.first * layout.image_elements, layout, packed, g, o_begin, o_end, pair,
                  y + pair.first * P * g.out);
    }
  }
  return done;
}

}  // namespace cpu
}  // namespace ddp
