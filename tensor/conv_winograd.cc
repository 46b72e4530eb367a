#include "tensor/conv_winograd.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/cpu_gemm.h"
#include "tensor/layout_transpose.h"

namespace ddp {
namespace cpu {
namespace {

constexpr int64_t kTile = 4;     // output pixels per tile side
constexpr int64_t kAlpha = 6;    // input pixels per tile side
constexpr int64_t kPoints = 36;  // kAlpha * kAlpha
constexpr int64_t kLanes = 8;    // floats per AVX2 register
constexpr int64_t kTaps = 9;
// The transformed tiles of one chunk of images (input or output side) stay within this many bytes.
constexpr int64_t kChunkBytes = int64_t{6} << 20;

// One convolution as this kernel runs it: `in` channels of h x w images in, `out` channels of oh x ow
// images out, zero padding `pad` on every side.
struct Problem {
  int64_t n, in, h, w;
  int64_t out, oh, ow;
  int64_t pad;
  bool channels_last;
  int64_t TilesHigh() const { return (oh + kTile - 1) / kTile; }
  int64_t TilesWide() const { return (ow + kTile - 1) / kTile; }
  int64_t TilesPerImage() const { return TilesHigh() * TilesWide(); }
  // The padded input image that every tile reads within: [PaddedHeight, PaddedWidth, in].
  int64_t PaddedHeight() const { return TilesHigh() * kTile + 2; }
  int64_t PaddedWidth() const { return TilesWide() * kTile + 2; }
};

// Per-thread scratch: taps, transformed filters (or their gradients' point sums), transformed inputs, point
// products (or transformed output gradients), a padded image, an image in NHWC, an output gradient in NHWC.
// Grows to the largest convolution and is reused.
enum Slot {
  kTapsSlot,
  kFilterSlot,
  kInputSlot,
  kProductSlot,
  kPaddedSlot,
  kImageSlot,
  kGradientSlot,
  kSlots
};
float* Scratch(Slot slot, int64_t floats) {
  thread_local std::array<std::vector<float>, kSlots> buffers;
  std::vector<float>& buffer = buffers[slot];
  if (static_cast<int64_t>(buffer.size()) < floats) buffer.resize(floats);
  return buffer.data();
}

__m256 Splat(float v) { return _mm256_set1_ps(v); }

// u[0..5] = G g for one filter column g[0..2] (G: 1/4; -1/6 x3; -1/6, 1/6, -1/6; 1/24, 1/12, 1/6;
// 1/24, -1/12, 1/6; 0, 0, 1).
inline void FilterTransform(__m256 g0, __m256 g1, __m256 g2, __m256* u) {
  const __m256 outer = g0 + g2;
  const __m256 weighted = g0 * Splat(1.0f / 24.0f) + g2 * Splat(1.0f / 6.0f);
  const __m256 middle = g1 * Splat(1.0f / 12.0f);
  u[0] = g0 * Splat(0.25f);
  u[1] = (outer + g1) * Splat(-1.0f / 6.0f);
  u[2] = (outer - g1) * Splat(-1.0f / 6.0f);
  u[3] = weighted + middle;
  u[4] = weighted - middle;
  u[5] = g2;
}

// t[0..5] = B^T d for one input column d[0..5].
inline void InputTransform(const __m256* d, __m256* t) {
  const __m256 four = Splat(4.0f), five = Splat(5.0f), two = Splat(2.0f);
  const __m256 d4_minus_d2 = d[4] - d[2];
  t[0] = four * d[0] - five * d[2] + d[4];
  t[1] = d[3] + d[4] - four * (d[1] + d[2]);
  t[2] = d[4] - d[3] + four * (d[1] - d[2]);
  t[3] = d4_minus_d2 + two * (d[3] - d[1]);
  t[4] = d4_minus_d2 + two * (d[1] - d[3]);
  t[5] = four * d[1] - five * d[3] + d[5];
}

// o[0..3] = A^T m for one column m[0..5] of point products.
inline void OutputTransform(const __m256* m, __m256* o) {
  const __m256 sum12 = m[1] + m[2], diff12 = m[1] - m[2];
  const __m256 sum34 = m[3] + m[4], diff34 = m[3] - m[4];
  o[0] = m[0] + sum12 + sum34;
  o[1] = diff12 + Splat(2.0f) * diff34;
  o[2] = sum12 + Splat(4.0f) * sum34;
  o[3] = diff12 + Splat(8.0f) * diff34 + m[5];
}

// m[0..5] = A o for one column o[0..3] of an output gradient tile (A = (A^T)^T; OutputTransform's
// transpose).
inline void GradientTransform(const __m256* o, __m256* m) {
  const __m256 even = o[0] + o[2], odd = o[1] + o[3];
  const __m256 even4 = o[0] + Splat(4.0f) * o[2], odd8 = Splat(2.0f) * o[1] + Splat(8.0f) * o[3];
  m[0] = o[0];
  m[1] = even + odd;
  m[2] = even - odd;
  m[3] = even4 + odd8;
  m[4] = even4 - odd8;
  m[5] = o[3];
}

// e[0..2] = G^T d for one column d[0..5] of a filter gradient's point sums (FilterTransform's transpose).
inline void FilterGradientTransform(const __m256* d, __m256* e) {
  const __m256 sum12 = d[1] + d[2], sum34 = d[3] + d[4];
  e[0] = d[0] * Splat(0.25f) - sum12 * Splat(1.0f / 6.0f) + sum34 * Splat(1.0f / 24.0f);
  e[1] = (d[2] - d[1]) * Splat(1.0f / 6.0f) + (d[3] - d[4]) * Splat(1.0f / 12.0f);
  e[2] = (sum34 - sum12) * Splat(1.0f / 6.0f) + d[5];
}

// filters [kPoints, in, out] = G g G^T of every filter, from taps [in, kTaps, out] (tap 3r + s at row r,
// column s; `flip` reads tap 8 - t for t, the filter turned by 180 degrees).
void TransformFilters(const float* taps, const Problem& p, bool flip, float* filters) {
  const int64_t plane = p.in * p.out;
#pragma omp parallel for if (p.in * p.out >= (int64_t{1} << 14))
  for (int64_t i = 0; i < p.in; ++i) {
    for (int64_t o = 0; o < p.out; o += kLanes) {
      __m256 g[kTaps];
      for (int64_t t = 0; t < kTaps; ++t) {
        g[t] = _mm256_loadu_ps(taps + (i * kTaps + (flip ? kTaps - 1 - t : t)) * p.out + o);
      }
      __m256 columns[3][kAlpha];  // G g, column by column
      for (int s = 0; s < 3; ++s) FilterTransform(g[s], g[3 + s], g[6 + s], columns[s]);
      for (int r = 0; r < kAlpha; ++r) {
        __m256 row[kAlpha];
        FilterTransform(columns[0][r], columns[1][r], columns[2][r], row);
        for (int s = 0; s < kAlpha; ++s)
          _mm256_storeu_ps(filters + (r * kAlpha + s) * plane + i * p.out + o, row[s]);
      }
    }
  }
}

// padded [PaddedHeight, PaddedWidth, in] = image (NCHW, or NHWC where p.channels_last) at (pad, pad),
// zeros around it.
void PadImage(const float* image, const Problem& p, float* padded) {
  const int64_t width = p.PaddedWidth(), floats = p.PaddedHeight() * width * p.in;
  const float* nhwc = image;
  if (!p.channels_last) {
    float* transposed = Scratch(kImageSlot, p.h * p.w * p.in);
    Transpose32(image, 1, p.in, p.h * p.w, transposed);
    nhwc = transposed;
  }
  std::fill(padded, padded + floats, 0.0f);
  for (int64_t r = 0; r < p.h; ++r) {
    std::memcpy(padded + ((r + p.pad) * width + p.pad) * p.in, nhwc + r * p.w * p.in,
                p.w * p.in * sizeof(float));
  }
}

// Calls visit(tile, th, tw, rows, cols) for each of one image's tiles, row of tiles by row: tile = first_tile
// + th * TilesWide() + tw, and rows x cols (at most 4 x 4) of its output pixels inside the image.
template <typename Visit>
void ForEachTile(const Problem& p, int64_t first_tile, Visit visit) {
  for (int64_t th = 0; th < p.TilesHigh(); ++th) {
    const int64_t rows = std::min(kTile, p.oh - th * kTile);
    for (int64_t tw = 0; tw < p.TilesWide(); ++tw) {
      visit(first_tile + th * p.TilesWide() + tw, th, tw, rows, std::min(kTile, p.ow - tw * kTile));
    }
  }
}

// The transformed tiles of one padded image into input [kPoints, tiles, in] from row `first_tile` on.
void TransformImageTiles(const float* padded, const Problem& p, int64_t first_tile, int64_t tiles,
                         float* input) {
  const int64_t width = p.PaddedWidth(), plane = tiles * p.in;
  ForEachTile(p, first_tile, [&](int64_t tile, int64_t th, int64_t tw, int64_t, int64_t) {
    const float* corner = padded + (th * kTile * width + tw * kTile) * p.in;
    for (int64_t c = 0; c < p.in; c += kLanes) {
      __m256 columns[kAlpha][kAlpha];  // B^T d, column by column
      for (int s = 0; s < kAlpha; ++s) {
        __m256 d[kAlpha];
        for (int r = 0; r < kAlpha; ++r) d[r] = _mm256_loadu_ps(corner + (r * width + s) * p.in + c);
        InputTransform(d, columns[s]);
      }
      for (int r = 0; r < kAlpha; ++r) {
        __m256 row[kAlpha], v[kAlpha];
        for (int s = 0; s < kAlpha; ++s) row[s] = columns[s][r];
        InputTransform(row, v);
        for (int s = 0; s < kAlpha; ++s) {
          _mm256_storeu_ps(input + (r * kAlpha + s) * plane + tile * p.in + c, v[s]);
        }
      }
    }
  });
}

// One image's output tiles from products [kPoints, tiles, out] (row `first_tile` on) into `result`
// [oh, ow, out] (NHWC), plus bias (null: none).
void TransformImageOutput(const float* products, const Problem& p, int64_t first_tile, int64_t tiles,
                          const float* bias, float* result) {
  const int64_t plane = tiles * p.out;
  ForEachTile(p, first_tile, [&](int64_t tile, int64_t th, int64_t tw, int64_t rows, int64_t cols) {
    for (int64_t o = 0; o < p.out; o += kLanes) {
      __m256 rows_done[kAlpha][kTile];  // m A, row by row
      for (int r = 0; r < kAlpha; ++r) {
        __m256 m[kAlpha];
        for (int s = 0; s < kAlpha; ++s) {
          m[s] = _mm256_loadu_ps(products + (r * kAlpha + s) * plane + tile * p.out + o);
        }
        OutputTransform(m, rows_done[r]);
      }
      const __m256 b = bias != nullptr ? _mm256_loadu_ps(bias + o) : _mm256_setzero_ps();
      for (int64_t j = 0; j < cols; ++j) {
        __m256 column[kAlpha], y[kTile];
        for (int r = 0; r < kAlpha; ++r) column[r] = rows_done[r][j];
        OutputTransform(column, y);
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t pixel = (th * kTile + i) * p.ow + tw * kTile + j;
          _mm256_storeu_ps(result + pixel * p.out + o, y[i] + b);
        }
      }
    }
  });
}

// One image's output-gradient tiles into gradients [kPoints, tiles, out] from row `first_tile` on: A dy A^T
// of each 4x4 tile of dy [oh, ow, out] (NHWC), zeros standing for the pixels beyond the output's edge.
void TransformImageGradient(const float* dy, const Problem& p, int64_t first_tile, int64_t tiles,
                            float* gradients) {
  const int64_t plane = tiles * p.out;
  ForEachTile(p, first_tile, [&](int64_t tile, int64_t th, int64_t tw, int64_t rows, int64_t cols) {
    for (int64_t o = 0; o < p.out; o += kLanes) {
      __m256 columns[kTile][kAlpha];  // A dy, column by column
      for (int64_t j = 0; j < kTile; ++j) {
        __m256 column[kTile];
        for (int64_t i = 0; i < kTile; ++i) {
          const int64_t pixel = (th * kTile + i) * p.ow + tw * kTile + j;
          column[i] = i < rows && j < cols ? _mm256_loadu_ps(dy + pixel * p.out + o) : _mm256_setzero_ps();
        }
        GradientTransform(column, columns[j]);
      }
      for (int r = 0; r < kAlpha; ++r) {
        __m256 row[kTile], m[kAlpha];
        for (int j = 0; j < kTile; ++j) row[j] = columns[j][r];
        GradientTransform(row, m);
        for (int s = 0; s < kAlpha; ++s) {
          _mm256_storeu_ps(gradients + (r * kAlpha + s) * plane + tile * p.out + o, m[s]);
        }
      }
    }
  });
}

// taps [in, kTaps, out] = G^T D G of each (in, out) pair's point sums D, from sums [kPoints, in, out].
void FilterGradients(const float* sums, const Problem& p, float* taps) {
  const int64_t plane = p.in * p.out;
#pragma omp parallel for if (p.in * p.out >= (int64_t{1} << 14))
  for (int64_t i = 0; i < p.in; ++i) {
    for (int64_t o = 0; o < p.out; o += kLanes) {
      __m256 rows[kAlpha][3];  // D G, row by row
      for (int r = 0; r < kAlpha; ++r) {
        __m256 d[kAlpha];
        for (int s = 0; s < kAlpha; ++s)
          d[s] = _mm256_loadu_ps(sums + (r * kAlpha + s) * plane + i * p.out + o);
        FilterGradientTransform(d, rows[r]);
      }
      for (int s = 0; s < 3; ++s) {
        __m256 column[kAlpha], e[3];
        for (int r = 0; r < kAlpha; ++r) column[r] = rows[r][s];
        FilterGradientTransform(column, e);
        for (int r = 0; r < 3; ++r) _mm256_storeu_ps(taps + (i * kTaps + r * 3 + s) * p.out + o, e[r]);
      }
    }
  }
}

// Images per chunk: the transformed tiles of a chunk, input or output side, within kChunkBytes.
int64_t ImagesPerChunk(const Problem& p) {
  const int64_t per_image = kPoints * p.TilesPerImage() * std::max(p.in, p.out) * int64_t{sizeof(float)};
  return std::clamp<int64_t>(kChunkBytes / per_image, 1, p.n);
}

// The convolution of p: `src` activations in, `dst` out (both NCHW, or NHWC where p.channels_last),
// filters given as taps [in, kTaps, out] (turned by 180 degrees where `flip`), bias (null: none).
void Convolve(const Problem& p, const float* src, const float* taps, bool flip, const float* bias,
              float* dst) {
  float* filters = Scratch(kFilterSlot, kPoints * p.in * p.out);
  TransformFilters(taps, p, flip, filters);
  const int64_t chunk = ImagesPerChunk(p), per_image = p.TilesPerImage();
  float* input = Scratch(kInputSlot, kPoints * chunk * per_image * p.in);
  float* products = Scratch(kProductSlot, kPoints * chunk * per_image * p.out);
  const int64_t src_image = p.in * p.h * p.w, dst_image = p.out * p.oh * p.ow;
  for (int64_t first = 0; first < p.n; first += chunk) {
    const int64_t count = std::min(chunk, p.n - first), tiles = count * per_image;
#pragma omp parallel for if (count > 1)
    for (int64_t i = 0; i < count; ++i) {
      float* padded = Scratch(kPaddedSlot, p.PaddedHeight() * p.PaddedWidth() * p.in);
      PadImage(src + (first + i) * src_image, p, padded);
      TransformImageTiles(padded, p, i * per_image, tiles, input);
    }
    for (int64_t point = 0; point < kPoints; ++point) {
      Gemm(false, false, tiles, p.out, p.in, 1.0f, input + point * tiles * p.in, p.in,
           filters + point * p.in * p.out, p.out, 0.0f, products + point * tiles * p.out, p.out);
    }
#pragma omp parallel for if (count > 1)
    for (int64_t i = 0; i < count; ++i) {
      float* image = dst + (first + i) * dst_image;
      float* result = p.channels_last ? image : Scratch(kImageSlot, dst_image);
      TransformImageOutput(products, p, i * per_image, tiles, bias, result);
      if (!p.channels_last) Transpose32(result, 1, p.oh * p.ow, p.out, image);
    }
  }
}

// The filter gradient of p's convolution as taps [in, kTaps, out], from its input `src` and output
// gradient `dy` (both NCHW, or NHWC where p.channels_last): the point sums over every tile of the batch,
// V^T W per point and chunk (V the input tiles, W the gradient tiles), transformed back.
void FilterGradient(const Problem& p, const float* src, const float* dy, float* taps) {
  const int64_t chunk = ImagesPerChunk(p), per_image = p.TilesPerImage();
  float* input = Scratch(kInputSlot, kPoints * chunk * per_image * p.in);
  float* gradients = Scratch(kProductSlot, kPoints * chunk * per_image * p.out);
  float* sums = Scratch(kFilterSlot, kPoints * p.in * p.out);
  const int64_t src_image = p.in * p.h * p.w, dy_image = p.out * p.oh * p.ow;
  for (int64_t first = 0; first < p.n; first += chunk) {
    const int64_t count = std::min(chunk, p.n - first), tiles = count * per_image;
#pragma omp parallel for if (count > 1)
    for (int64_t i = 0; i < count; ++i) {
      float* padded = Scratch(kPaddedSlot, p.PaddedHeight() * p.PaddedWidth() * p.in);
      PadImage(src + (first + i) * src_image, p, padded);
      TransformImageTiles(padded, p, i * per_image, tiles, input);
      const float* image = dy + (first + i) * dy_image;
      if (!p.channels_last) {
        float* nhwc = Scratch(kGradientSlot, dy_image);
        Transpose32(image, 1, p.out, p.oh * p.ow, nhwc);
        image = nhwc;
      }
      TransformImageGradient(image, p, i * per_image, tiles, gradients);
    }
    for (int64_t point = 0; point < kPoints; ++point) {
      Gemm(true, false, p.in, p.out, tiles, 1.0f, input + point * tiles * p.in, p.in,
           gradients + point * tiles * p.out, p.out, first == 0 ? 0.0f : 1.0f, sums + point * p.in * p.out,
           p.out);
    }
  }
  FilterGradients(sums, p, taps);
}

}  // namespace

bool WinogradAvx2Fits(const ConvGeometry& g) {
  return g.kh == 3 && g.kw == 3 && g.stride == 1 && g.padding <= 2 && g.c % kLanes == 0 &&
         g.out % kLanes == 0 && g.n > 0 && g.c > 0 && g.out > 0 && g.oh > 0 && g.ow > 0;
}

void WinogradAvx2Forward(const float* x, const float* w, const float* b, const ConvGeometry& g, float* y) {
  const Problem p{g.n, g.c, g.h, g.w, g.out, g.oh, g.ow, g.padding, g.channels_last};
  float* taps = Scratch(kTapsSlot, g.c * kTaps * g.out);
  Transpose32(w, 1, g.out, g.c * kTaps, taps);  // [out, c * 9] -> [c, 9, out]
  Convolve(p, x, taps, /*flip=*/false, b, y);
}

void WinogradAvx2BackwardData(const float* w, const float* gy, const ConvGeometry& g, float* gx) {
  const Problem p{g.n, g.out, g.oh, g.ow, g.c, g.h, g.w, 2 - g.padding, g.channels_last};
  float* taps = Scratch(kTapsSlot, g.out * kTaps * g.c);
  Transpose32(w, g.out, g.c, kTaps, taps);  // each [c, 9] of w -> [9, c]: [out, 9, c]
  Convolve(p, gy, taps, /*flip=*/true, nullptr, gx);
}

void WinogradAvx2BackwardWeights(const float* x, const float* gy, const ConvGeometry& g, float* gw) {
  const Problem p{g.n, g.c, g.h, g.w, g.out, g.oh, g.ow, g.padding, g.channels_last};
  float* taps = Scratch(kTapsSlot, g.c * kTaps * g.out);
  FilterGradient(p, x, gy, taps);
  Transpose32(taps, 1, g.c * kTaps, g.out, gw);  // [c, 9, out] -> [out, c * 9]
}

}  // namespace cpu
}  // namespace ddp
