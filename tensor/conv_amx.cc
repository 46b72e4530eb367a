// The channels-last bf16 forward on AMX tiles (contracts: tensor/conv_amx.h; Note [Channels-last forward on
// AMX tiles] there).
#include "tensor/conv_amx.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/check.h"
#include "tensor/amx_tiles.h"

namespace ddp {
namespace cpu {
namespace {

constexpr int64_t kTile = 16;        // output pixels (tile rows) and output channels (tile columns) per tile
constexpr int64_t kTileK = 32;       // products per TDPBF16PS: a tile row of 32 bf16 (64 bytes)
constexpr int64_t kOutPerPass = 64;  // four accumulator tiles side by side
constexpr int64_t kMaxK = 1152;      // the K up to which oneDNN's matmul sums in this order
// w [out, c, 3, 3] as the B operand: for each block of 16 output channels, K = (tap, channel) in pairs,
// each pair's two values side by side for each of the 16 channels (TDPBF16PS's layout), blocks one
// after another ([out / 16][K / 2][16][2]).
void PackWeights(const BFloat16* w, const ConvGeometry& g, BFloat16* packed) {
  const int64_t K = g.K(), taps = g.kh * g.kw;
  for (int64_t o = 0; o < g.out; ++o) {
    BFloat16* block = packed + (o / kTile) * K * kTile + (o % kTile) * 2;
    for (int64_t t = 0; t < taps; ++t) {
      for (int64_t ch = 0; ch < g.c; ++ch) {
        const int64_t k = t * g.c + ch;
        block[(k / 2) * 2 * kTile + k % 2] = w[(o * g.c + ch) * taps + t];
      }
    }
  }
}

// Up to 16 consecutive output pixels of one output row: (oy, ox0 ... ox0 + pixels - 1).
struct PixelTile {
  int64_t oy = 0, ox0 = 0, pixels = 0;
};

// The output pixels of an image in tiles of up to 16 along each output row, row by row.
std::vector<PixelTile> PixelTiles(const ConvGeometry& g) {
  std::vector<PixelTile> tiles;
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    for (int64_t ox0 = 0; ox0 < g.ow; ox0 += kTile) tiles.push_back({oy, ox0, std::min(kTile, g.ow - ox0)});
  }
  return tiles;
}

// One image: y [oh * ow, out] from its padded input and the packed weights (Note [Channels-last forward on
// AMX tiles]). The pixel tiles go two at a time (the last alone when their count is odd), each against two
// tiles of 16 output channels, so that every operand tile loaded serves two products; each accumulator
// starts from zero and sums over the 9 taps, and within a tap over the channels 32 at a time.
__attribute__((target("amx-tile,amx-bf16"))) void ImageForward(const BFloat16* padded, const BFloat16* packed,
                                                               const ConvGeometry& g,
                                                               const std::vector<PixelTile>& tiles,
                                                               float* y) {
  const int64_t K = g.K(), wp = g.w + 2, a_stride = g.stride * g.c * 2, c_stride = g.out * 4;
  const int64_t block_stride = K * kTile;  // packed elements per 16 output channels
  // Where a pixel tile's A operands start for tap 0 and channel 0.
  const auto origin = [&](const PixelTile& p) {
    return padded + (p.oy * g.stride * wp + p.ox0 * g.stride) * g.c;
  };
  LoadedTileConfig loaded;
  for (size_t i = 0; i < tiles.size(); i += 2) {
    const PixelTile& p0 = tiles[i];
    const bool paired = i + 1 < tiles.size();
    const PixelTile& p1 = paired ? tiles[i + 1] : p0;
    LoadTwoByTwoTileConfig(p0.pixels, paired ? p1.pixels : 1, loaded);
    const BFloat16* a0 = origin(p0);
    const BFloat16* a1 = origin(p1);
    for (int64_t o0 = 0; o0 < g.out; o0 += 2 * kTile) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      const BFloat16* b0 = packed + (o0 / kTile) * block_stride;
      for (int64_t t = 0; t < 9; ++t) {
        const int64_t tap = ((t / 3) * wp + t % 3) * g.c;
        for (int64_t c0 = 0; c0 < g.c; c0 += kTileK) {
          const BFloat16* b = b0 + (t * g.c + c0) * kTile;
          _tile_loadd(4, a0 + tap + c0, a_stride);
          _tile_loadd(6, b, 64);
          _tile_dpbf16ps(0, 4, 6);
          _tile_loadd(7, b + block_stride, 64);
          _tile_dpbf16ps(1, 4, 7);
          if (!paired) continue;
          _tile_loadd(5, a1 + tap + c0, a_stride);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      float* out0 = y + (p0.oy * g.ow + p0.ox0) * g.out + o0;
      _tile_stored(0, out0, c_stride);
      _tile_stored(1, out0 + kTile, c_stride);
      if (!paired) continue;
      float* out1 = y + (p1.oy * g.ow + p1.ox0) * g.out + o0;
      _tile_stored(2, out1, c_stride);
      _tile_stored(3, out1 + kTile, c_stride);
    }
  }
  ReleaseTiles(loaded);
}

}  // namespace

bool AmxForwardApplies(const ConvGeometry& g) {
  return g.channels_last && g.kh == 3 && g.kw == 3 && g.padding == 1 && (g.stride == 1 || g.stride == 2) &&
         g.c % kTileK == 0 && g.out % kOutPerPass == 0 && g.K() <= kMaxK && AmxTileDataGranted();
}

void AmxForwardChannelsLast(const BFloat16* x, const BFloat16* w, const ConvGeometry& g, float* y) {
  DDP_CHECK(AmxForwardApplies(g)) << "AmxForwardChannelsLast: no AMX kernel for this convolution (c " << g.c
                                  << ", out " << g.out << ", " << g.kh << "x" << g.kw << ", stride "
                                  << g.stride << ", padding " << g.padding << ")";
  thread_local std::vector<BFloat16> packed_weights;  // the calling thread's, read by every kernel thread
  BFloat16* packed = AlignedScratch(packed_weights, g.out * g.K());
  PackWeights(w, g, packed);
  const int64_t image = g.h * g.w * g.c, padded_image = (g.h + 2) * (g.w + 2) * g.c;
  const std::vector<PixelTile> tiles = PixelTiles(g);
#pragma omp parallel if (g.n > 1)
  {
    thread_local std::vector<BFloat16> padded_buffer;  // each kernel thread's own
    BFloat16* padded = AlignedScratch(padded_buffer, padded_image);
#pragma omp for
    for (int64_t i = 0; i < g.n; ++i) {
      PadImage(x + i * image, g.h, g.w, g.c, padded);
      ImageForward(padded, packed, g, tiles, y + i * g.P() * g.out);
    }
  }
}

}  // namespace cpu
}  // namespace ddp
