// The channels-last bf16 input gradient on AMX tiles (contracts: tensor/conv_amx_input_gradient.h; Note
// [Channels-last input gradients on AMX tiles] there).
#include "tensor/conv_amx_input_gradient.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "tensor/amx_tiles.h"
#include "tensor/layout_transpose.h"

namespace ddp {
namespace cpu {
namespace {

constexpr int64_t kTile = 16;   // positions (tile rows) and input channels (tile columns) per tile
constexpr int64_t kTileK = 32;  // products per TDPBF16PS: a tile row of 32 bf16 (64 bytes)
// The input maps (pixels) up to which the input gradient's kernel is faster than oneDNN's primitive (Note
// [Channels-last input gradients on AMX tiles]).
constexpr int64_t kMaxInputGradientPixels = 64;
constexpr int64_t kMaxStride2InputGradientPixels = 3136;
// Packed weights up to which the input gradient runs image by image (each image's padded output gradient
// serves all its passes over the input channels from L2, the weights staying there too); above, pass by
// pass over all images, so that one pass's weights stay in L2 (Note [Channels-last input gradients on AMX
// tiles]).
constexpr int64_t kImageByImageWeightBytes = int64_t{3} << 19;

// w [out, c, 3, 3] as the B operands of the input gradient: for each block of 16 input channels and each
// tap, K = the output channels in pairs, each pair's two values side by side for each of the 16 channels
// ([c / 16][9][out / 2][16][2]). The weights are first put taps-first ([out, 9, c], register-tile
// transposes) so that a pair's two rows interleave element by element into whole 64-byte rows.
void PackWeightsForInputGradient(const BFloat16* w, const ConvGeometry& g, BFloat16* packed) {
  thread_local std::vector<BFloat16> taps_first_buffer;
  BFloat16* taps_first = AlignedScratch(taps_first_buffer, g.out * g.K());
  Transpose16(w, g.out, g.c, 9, taps_first);
  const int64_t pairs = g.out / 2, blocks = g.c / kTile;
  uint32_t* words = reinterpret_cast<uint32_t*>(packed);  // one (even, odd) output-channel pair each
  for (int64_t r = 0; r < pairs; ++r) {
    for (int64_t t = 0; t < 9; ++t) {
      const BFloat16* even = taps_first + (2 * r * 9 + t) * g.c;
      const BFloat16* odd = even + 9 * g.c;
      for (int64_t cb = 0; cb < blocks; ++cb) {
        uint32_t* dst = words + ((cb * 9 + t) * pairs + r) * kTile;
        for (int64_t j = 0; j < kTile; ++j) {
          dst[j] = static_cast<uint32_t>(even[cb * kTile + j].bits) |
                   static_cast<uint32_t>(odd[cb * kTile + j].bits) << 16;
        }
      }
    }
  }
}

// One class of input pixels for the input gradient: (iy, ix) = (a * stride + py, b * stride + px) for a <
// rows, b < cols, at position q = a * (ow + 2) + b of the padded output gradient's grid; the taps through
// which they reach an output pixel, from the last to the first, and for each the distance from a position
// to the padded output-gradient row it reads (Note [Channels-last input gradients on AMX tiles]).
struct InputPixelClass {
  int64_t py = 0, px = 0, rows = 0, cols = 0;
  int taps = 0;
  int tap[9] = {};
  int64_t offset[9] = {};
};

// The classes of g's input pixels: one for stride 1 (every tap reaches an output pixel), four for stride 2
// (by the parity of iy and ix; a class reaches outputs through the taps whose ky and kx match its parities).
std::vector<InputPixelClass> InputPixelClasses(const ConvGeometry& g) {
  std::vector<InputPixelClass> classes;
  const int64_t wp = g.ow + 2;
  for (int64_t py = 0; py < g.stride; ++py) {
    for (int64_t px = 0; px < g.stride; ++px) {
      InputPixelClass k;
      k.py = py;
      k.px = px;
      k.rows = (g.h - py + g.stride - 1) / g.stride;
      k.cols = (g.w - px + g.stride - 1) / g.stride;
      for (int t = 8; t >= 0; --t) {
        const int64_t sy = py + 1 - t / 3, sx = px + 1 - t % 3;  // stride x (output pixel - a, - b)
        if (sy % g.stride != 0 || sx % g.stride != 0) continue;
        k.tap[k.taps] = t;
        k.offset[k.taps] = (sy / g.stride + 1) * wp + (sx / g.stride + 1);
        ++k.taps;
      }
      if (k.rows > 0 && k.cols > 0) classes.push_back(k);
    }
  }
  return classes;
}

// Up to 16 rows of a finished accumulator block (16 positions q0... x 32 channels, float32, row stride
// 32) into gx [h, w, c] at channel c0, the positions in the grid's columns past the class's dropped.
void StoreInputGradientRows(const float* block, int64_t q0, int64_t rows, int64_t c0,
                            const InputPixelClass& k, const ConvGeometry& g, float* gx) {
  const int64_t wp = g.ow + 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t a = (q0 + r) / wp, b = (q0 + r) % wp;
    if (b >= k.cols) continue;
    const int64_t iy = a * g.stride + k.py, ix = b * g.stride + k.px;
    std::memcpy(gx + (iy * g.w + ix) * g.c + c0, block + r * 2 * kTile, 2 * kTile * sizeof(float));
  }
}

// One image's input gradient at the pixels of class k for input channels [c0, c0 + 32): gx [h, w, c] (those
// pixels' values c0...c0 + 31) from its padded output gradient and the packed weights (Note [Channels-last
// input gradients on AMX tiles]). The class's positions go in tiles of 16 along the grid, whose columns past
// the class's are computed and dropped, two tiles at a time (the last alone when their count is odd), each
// against two tiles of 16 input channels, so that every operand tile loaded serves two products. Each
// accumulator starts from zero and sums over the output channels 32 at a time, and for each 32 over the
// class's taps from the last to the first. The tiles are configured through `loaded` and left configured.
__attribute__((target("amx-tile,amx-bf16"))) void ImageInputGradient(const BFloat16* padded,
                                                                     const BFloat16* packed, int64_t c0,
                                                                     const InputPixelClass& k,
                                                                     const ConvGeometry& g, float* gx,
                                                                     LoadedTileConfig& loaded) {
  const int64_t wp = g.ow + 2, positions = (k.rows - 1) * wp + k.cols, a_stride = g.out * 2;
  const int64_t block = 9 * g.out * kTile;  // packed elements per 16 input channels
  const BFloat16* b0 = packed + (c0 / kTile) * block;
  alignas(64) float first[kTile * 2 * kTile], second[kTile * 2 * kTile];
  for (int64_t q0 = 0; q0 < positions; q0 += 2 * kTile) {
    const int64_t q1 = q0 + kTile;
    const bool paired = q1 < positions;
    const int64_t rows0 = std::min(kTile, positions - q0),
                  rows1 = paired ? std::min(kTile, positions - q1) : 1;
    LoadTwoByTwoTileConfig(rows0, rows1, loaded);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t o0 = 0; o0 < g.out; o0 += kTileK) {
      for (int j = 0; j < k.taps; ++j) {
        const BFloat16* a = padded + (q0 + k.offset[j]) * g.out + o0;
        const BFloat16* b = b0 + (k.tap[j] * g.out + o0) * kTile;
        _tile_loadd(4, a, a_stride);
        _tile_loadd(6, b, 64);
        _tile_loadd(7, b + block, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (!paired) continue;
        _tile_loadd(5, a + kTile * g.out, a_stride);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
    _tile_stored(0, first, 2 * kTile * 4);
    _tile_stored(1, first + kTile, 2 * kTile * 4);
    StoreInputGradientRows(first, q0, rows0, c0, k, g, gx);
    if (!paired) continue;
    _tile_stored(2, second, 2 * kTile * 4);
    _tile_stored(3, second + kTile, 2 * kTile * 4);
    StoreInputGradientRows(second, q1, rows1, c0, k, g, gx);
  }
}

// The images in a group of the dense-map input gradient: their shifted copies (3 x 72 KB each at
// ResNet-18's layer4) stay in L2 while every block of 16 input channels, with its packed weights, passes.
constexpr int64_t kDenseGroupImages = 8;
// Images against one B operand: four accumulators, one B tile and three A tiles in turn fill the 8 tiles.
constexpr int kDenseImagesPerProduct = 4;

// For a stride-1 map of at most 16 pixels: one image's output gradient gy [oh, ow, out] as three copies
// shifted by dx = 0, 1, 2 columns, copy dx holding the padded gradient's pixel (y, x + dx) at row
// y * ow + x, so that for tap (ky, kx) the rows the map's pixels read, in order, are consecutive: copy
// 2 - kx from row (2 - ky) * ow. Each copy is stored by blocks of 32 output channels
// ([3][out / 32][(oh + 2) * ow][32]), so that a tile's rows are 64 consecutive bytes each: rows `out`
// elements apart (1 KB at layer4) would fall into a few L1 sets and evict each other.
void ShiftedGradientCopies(const BFloat16* gy, const ConvGeometry& g, BFloat16* copies) {
  const int64_t rows = (g.oh + 2) * g.ow, blocks = g.out / kTileK;
  for (int64_t dx = 0; dx < 3; ++dx) {
    for (int64_t y = 0; y < g.oh + 2; ++y) {
      for (int64_t x = 0; x < g.ow; ++x) {
        const int64_t sy = y - 1, sx = x + dx - 1;
        const bool inside = sy >= 0 && sy < g.oh && sx >= 0 && sx < g.ow;
        const BFloat16* src = gy + (sy * g.ow + sx) * g.out;
        for (int64_t b = 0; b < blocks; ++b) {
          BFloat16* dst = copies + ((dx * blocks + b) * rows + y * g.ow + x) * kTileK;
          if (inside) {
            std::memcpy(static_cast<void*>(dst), src + b * kTileK, kTileK * sizeof(BFloat16));
          } else {
            std::memset(static_cast<void*>(dst), 0, kTileK * sizeof(BFloat16));
          }
        }
      }
    }
  }
}

// The input gradient of kImages images (their shifted copies `copies`, `copy_stride` apart) at input
// channels [c0, c0 + 16): gx [h, w, c] of each (its pixels' values c0...c0 + 15, `image` apart). One
// accumulator per image (the map's pixels in its rows), each from zero over the output channels 32 at a
// time and for each 32 over the taps from the last to the first; each B tile loaded serves every image.
// REQUIRES: the dense configuration loaded (DenseTileConfig).
template <int kImages>
__attribute__((target("amx-tile,amx-bf16"))) void DenseMapInputGradient(const BFloat16* copies,
                                                                        int64_t copy_stride,
                                                                        const BFloat16* packed, int64_t c0,
                                                                        const ConvGeometry& g, float* gx,
                                                                        int64_t image) {
  const int64_t rows = (g.oh + 2) * g.ow, a_stride = 64, shift = g.out * rows;
  const BFloat16* b0 = packed + (c0 / kTile) * 9 * g.out * kTile;
  _tile_zero(0);
  if constexpr (kImages > 1) _tile_zero(1);
  if constexpr (kImages > 2) _tile_zero(2);
  if constexpr (kImages > 3) _tile_zero(3);
  for (int64_t o0 = 0; o0 < g.out; o0 += kTileK) {
    for (int t = 8; t >= 0; --t) {
      const BFloat16* a = copies + (2 - t % 3) * shift + o0 * rows + (2 - t / 3) * g.ow * kTileK;
      _tile_loadd(4, b0 + (t * g.out + o0) * kTile, 64);
      _tile_loadd(5, a, a_stride);
      _tile_dpbf16ps(0, 5, 4);
      if constexpr (kImages > 1) {
        _tile_loadd(6, a + copy_stride, a_stride);
        _tile_dpbf16ps(1, 6, 4);
      }
      if constexpr (kImages > 2) {
        _tile_loadd(7, a + 2 * copy_stride, a_stride);
        _tile_dpbf16ps(2, 7, 4);
      }
      if constexpr (kImages > 3) {
        _tile_loadd(5, a + 3 * copy_stride, a_stride);
        _tile_dpbf16ps(3, 5, 4);
      }
    }
  }
  const int64_t c_stride = g.c * sizeof(float);
  _tile_stored(0, gx + c0, c_stride);
  if constexpr (kImages > 1) _tile_stored(1, gx + image + c0, c_stride);
  if constexpr (kImages > 2) _tile_stored(2, gx + 2 * image + c0, c_stride);
  if constexpr (kImages > 3) _tile_stored(3, gx + 3 * image + c0, c_stride);
}

// The tile configuration of DenseMapInputGradient for maps of `pixels` pixels: accumulators 0-3 and A
// operands 5-7 of that many rows, the B operand 4 of 16 K pairs.
AmxTileConfig DenseTileConfig(int64_t pixels) {
  AmxTileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = static_cast<uint8_t>(t == 4 ? kTile : pixels);
    config.bytes_per_row[t] = 64;
  }
  return config;
}

// The stride-1 input gradient on maps of at most 16 pixels, each image's pixels in one tile: the images
// split among the threads, each thread's in groups of kDenseGroupImages whose shifted copies stay in L2
// while the blocks of 16 input channels go by (Note [Channels-last input gradients on AMX tiles]).
__attribute__((target("amx-tile,amx-bf16"))) void DenseInputGradient(const BFloat16* packed,
                                                                     const BFloat16* gy,
                                                                     const ConvGeometry& g, float* gx) {
  const int64_t copy_stride = 3 * (g.oh + 2) * g.ow * g.out, image = g.h * g.w * g.c;
  const int64_t groups = (g.n + kDenseGroupImages - 1) / kDenseGroupImages;
#pragma omp parallel if (g.n > 1)
  {
    thread_local std::vector<BFloat16> copies_buffer;  // each kernel thread's own
    BFloat16* copies = AlignedScratch(copies_buffer, kDenseGroupImages * copy_stride);
    const AmxTileConfig config = DenseTileConfig(g.h * g.w);
    _tile_loadconfig(&config);  // one configuration for the whole call
#pragma omp for schedule(static)
    for (int64_t group = 0; group < groups; ++group) {
      const int64_t first = group * kDenseGroupImages, count = std::min(kDenseGroupImages, g.n - first);
      for (int64_t j = 0; j < count; ++j)
        ShiftedGradientCopies(gy + (first + j) * g.P() * g.out, g, copies + j * copy_stride);
      for (int64_t c0 = 0; c0 < g.c; c0 += kTile) {
        for (int64_t j = 0; j < count; j += kDenseImagesPerProduct) {
          const BFloat16* a = copies + j * copy_stride;
          float* out = gx + (first + j) * image;
          switch (std::min<int64_t>(kDenseImagesPerProduct, count - j)) {
            case 4:
              DenseMapInputGradient<4>(a, copy_stride, packed, c0, g, out, image);
              break;
            case 3:
              DenseMapInputGradient<3>(a, copy_stride, packed, c0, g, out, image);
              break;
            case 2:
              DenseMapInputGradient<2>(a, copy_stride, packed, c0, g, out, image);
              break;
            default:
              DenseMapInputGradient<1>(a, copy_stride, packed, c0, g, out, image);
              break;
          }
        }
      }
    }
    _tile_release();
  }
}

// The input gradient image by image: each image's padded output gradient, in its thread's buffer, serves
// all its passes over the input channels (32 at a time) and pixel classes while it is in L2.
void ImageByImageInputGradient(const BFloat16* packed, const BFloat16* gy, const ConvGeometry& g, float* gx) {
  const std::vector<InputPixelClass> classes = InputPixelClasses(g);
  const int64_t passes = g.c / (2 * kTile), image = g.h * g.w * g.c;
  const int64_t padded_image = (g.oh + 2) * (g.ow + 2) * g.out;
#pragma omp parallel if (g.n > 1)
  {
    thread_local std::vector<BFloat16> padded_buffer;  // each kernel thread's own
    BFloat16* padded = AlignedScratch(padded_buffer, padded_image);
    LoadedTileConfig loaded;  // loaded only when a tile pair's rows change (LoadTwoByTwoTileConfig)
#pragma omp for schedule(static)
    for (int64_t i = 0; i < g.n; ++i) {
      PadImage(gy + i * g.P() * g.out, g.oh, g.ow, g.out, padded);
      for (int64_t pass = 0; pass < passes; ++pass) {
        for (const InputPixelClass& k : classes)
          ImageInputGradient(padded, packed, pass * 2 * kTile, k, g, gx + i * image, loaded);
      }
    }
    ReleaseTiles(loaded);
  }
}

// The input gradient pass by pass (32 input channels at a time) over the whole batch, padded once, so that
// one pass's packed weights stay in L2 while every image goes by.
void PassByPassInputGradient(const BFloat16* packed, const BFloat16* gy, const ConvGeometry& g, float* gx) {
  const std::vector<InputPixelClass> classes = InputPixelClasses(g);
  const int64_t passes = g.c / (2 * kTile), image = g.h * g.w * g.c;
  const int64_t padded_image = (g.oh + 2) * (g.ow + 2) * g.out;
  thread_local std::vector<BFloat16> padded_gradient;  // the calling thread's, read by every kernel thread
  BFloat16* padded = AlignedScratch(padded_gradient, g.n * padded_image);
  for (int64_t i = 0; i < g.n; ++i)
    PadImage(gy + i * g.P() * g.out, g.oh, g.ow, g.out, padded + i * padded_image);
#pragma omp parallel if (g.n * passes > 1)
  {
    LoadedTileConfig loaded;  // loaded only when a tile pair's rows change (LoadTwoByTwoTileConfig)
#pragma omp for collapse(2) schedule(static)
    for (int64_t pass = 0; pass < passes; ++pass) {
      for (int64_t i = 0; i < g.n; ++i) {
        for (const InputPixelClass& k : classes) {
          ImageInputGradient(padded + i * padded_image, packed, pass * 2 * kTile, k, g, gx + i * image,
                             loaded);
        }
      }
    }
    ReleaseTiles(loaded);
  }
}

}  // namespace

bool AmxInputGradientComputes(const ConvGeometry& g) {
  return g.channels_last && g.kh == 3 && g.kw == 3 && g.padding == 1 && (g.stride == 1 || g.stride == 2) &&
         g.c % (2 * kTile) == 0 && g.out % kTileK == 0 && AmxTileDataGranted();
}

bool AmxInputGradientApplies(const ConvGeometry& g) {
  const int64_t limit = g.stride == 1 ? kMaxInputGradientPixels : kMaxStride2InputGradientPixels;
  return g.h * g.w <= limit && AmxInputGradientComputes(g);
}

void AmxInputGradientChannelsLast(const BFloat16* w, const BFloat16* gy, const ConvGeometry& g, float* gx) {
  DDP_CHECK(AmxInputGradientComputes(g))
      << "AmxInputGradientChannelsLast: no AMX kernel for this convolution (c " << g.c << ", out " << g.out
      << ", " << g.h << "x" << g.w << ", " << g.kh << "x" << g.kw << ", stride " << g.stride << ", padding "
      << g.padding << ")";
  thread_local std::vector<BFloat16> packed_weights;  // the calling thread's, read by every kernel thread
  BFloat16* packed = AlignedScratch(packed_weights, g.out * g.K());
  PackWeightsForInputGradient(w, g, packed);
  if (g.stride == 1 && g.h * g.w <= kTile) {
    DenseInputGradient(packed, gy, g, gx);
  } else if (g.out * g.K() * static_cast<int64_t>(sizeof(BFloat16)) <= kImageByImageWeightBytes) {
    ImageByImageInputGradient(packed, gy, g, gx);
  } else {
    PassByPassInputGradient(packed, gy, g, gx);
  }
}

}  // namespace cpu
}  // namespace ddp
