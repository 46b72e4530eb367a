// Channels-last input gradients tap by tap (contracts and Note [Input gradients tap by tap]:
// tensor/conv_input_gradient_by_tap.h).
#include "tensor/conv_input_gradient_by_tap.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "tensor/cpu_gemm.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/thread_scratch.h"

namespace ddp {
namespace cpu {
namespace {

std::atomic<InputGradientAlgorithm> g_algorithm{InputGradientAlgorithm::kAuto};

// Whether a pass over `count` images moving `elements` values is worth the kernel threads.
bool ParallelImages(int64_t count, int64_t elements) { return count > 1 && elements > (int64_t{1} << 16); }

// The output gradient's rows [n * |ry| * |rx|, out] of the pixels in the rectangle ry x rx of every
// image, image by image in pixel order.
template <typename T>
void GatherOutputRows(const T* gy, const ConvGeometry& g, InsideOutputRange ry, InsideOutputRange rx,
                      T* rows) {
  const int64_t per_image = ry.size() * rx.size();
#pragma omp parallel for if (ParallelImages(g.n, g.n * per_image * g.out))
  for (int64_t i = 0; i < g.n; ++i) {
    for (int64_t oy = ry.first; oy < ry.end; ++oy) {
      std::memcpy(rows + (i * per_image + (oy - ry.first) * rx.size()) * g.out,
                  gy + ((i * g.oh + oy) * g.ow + rx.first) * g.out, sizeof(T) * rx.size() * g.out);
    }
  }
}

// Adds the products [n * |ry| * |rx|, c] of tap (ky, kx), one row per output pixel of the rectangle,
// to the input pixels those pixels read.
void AddToInputPixels(const float* products, const ConvGeometry& g, int64_t ky, int64_t kx,
                      InsideOutputRange ry, InsideOutputRange rx, float* gx) {
  const int64_t per_image = ry.size() * rx.size();
#pragma omp parallel for if (ParallelImages(g.n, g.n * per_image * g.c))
  for (int64_t i = 0; i < g.n; ++i) {
    for (int64_t oy = ry.first; oy < ry.end; ++oy) {
      const int64_t iy = oy * g.stride - g.padding + ky;
      const float* src = products + (i * per_image + (oy - ry.first) * rx.size()) * g.c;
      float* row = gx + ((i * g.h + iy) * g.w + rx.first * g.stride - g.padding + kx) * g.c;
      for (int64_t j = 0; j < rx.size(); ++j) {
        float* dst = row + j * g.stride * g.c;
        const float* add = src + j * g.c;
        for (int64_t ch = 0; ch < g.c; ++ch) dst[ch] += add[ch];
      }
    }
  }
}

// Owner of the per-thread scratch: slot 0 the gathered output-gradient rows, slot 1 a tap's products.
struct TapScratch {};

template <typename T>
void ByTap(const T* taps_first, const T* gy, const ConvGeometry& g, float* gx) {
  std::fill(gx, gx + g.n * g.h * g.w * g.c, 0.0f);
  T* rows = ThreadScratch<TapScratch, T, 2>(0, g.n * g.P() * g.out);
  float* products = ThreadScratch<TapScratch, float, 2>(1, g.n * g.P() * g.c);
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    const InsideOutputRange ry = InsideOutputs(ky, g.h, g.oh, g);
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const InsideOutputRange rx = InsideOutputs(kx, g.w, g.ow, g);
      const int64_t count = g.n * ry.size() * rx.size();
      if (count == 0) continue;
      // A tap that every output pixel reads inside takes the output gradient as it lies.
      const bool all_pixels = count == g.n * g.P();
      if (!all_pixels) GatherOutputRows(gy, g, ry, rx, rows);
      Gemm(false, false, count, g.c, g.out, 1.0f, all_pixels ? gy : rows, g.out,
           taps_first + (ky * g.kw + kx) * g.c, g.K(), 0.0f, products, g.c);
      AddToInputPixels(products, g, ky, kx, ry, rx, gx);
    }
  }
}

}  // namespace

void SetInputGradientAlgorithm(InputGradientAlgorithm algorithm) { g_algorithm.store(algorithm); }

bool InputGradientByTapApplies(const ConvGeometry& g) {
  switch (g_algorithm.load()) {
    case InputGradientAlgorithm::kAllTaps:
      return false;
    case InputGradientAlgorithm::kInsideTaps:
      return true;
    case InputGradientAlgorithm::kAuto:
      break;
  }
  return PaddedTapFraction(g) >= kMinPaddedTapFraction;
}

void InputGradientByTap(const float* taps_first, const float* gy, const ConvGeometry& g, float* gx) {
  ByTap(taps_first, gy, g, gx);
}

void InputGradientByTap(const BFloat16* taps_first, const BFloat16* gy, const ConvGeometry& g, float* gx) {
  ByTap(taps_first, gy, g, gx);
}

}  // namespace cpu
}  // namespace ddp
