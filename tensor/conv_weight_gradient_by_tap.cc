// Channels-last weight gradients tap by tap (contracts and Note [Weight gradients tap by tap]:
// tensor/conv_weight_gradient_by_tap.h).
#include "tensor/conv_weight_gradient_by_tap.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "tensor/cpu_gemm.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/thread_scratch.h"

namespace ddp {
namespace cpu {
namespace {

std::atomic<WeightGradientAlgorithm> g_algorithm{WeightGradientAlgorithm::kAuto};

// The output positions [first, end) along one axis whose tap at kernel offset k reads inside an input of
// `size` positions: 0 <= o * stride - padding + k < size.
struct OutputRange {
  int64_t first, end;
  int64_t size() const { return end - first; }
};

OutputRange InsideOutputs(int64_t k, int64_t size, int64_t outputs, const ConvGeometry& g) {
  const int64_t low = g.padding - k;              // o * stride >= low
  const int64_t high = size - 1 + g.padding - k;  // o * stride <= high
  const int64_t first = low <= 0 ? 0 : (low + g.stride - 1) / g.stride;
  const int64_t end = high < 0 ? 0 : std::min(outputs, high / g.stride + 1);
  return {std::min(first, end), end};
}

// Owner of the per-thread scratch for the gathered operands: slot 0 the output gradient's rows, slot 1 the
// input pixels.
struct GatherScratch {};

// Gathers, for tap (ky, kx) with inside ranges ry and rx, the output gradient's row of every pixel inside
// (rows, [count, out]; null: not wanted) and the input pixel each reads (pixels, [count, c]), image by
// image in pixel order.
template <typename T>
void GatherTap(const T* x, const T* gy, const ConvGeometry& g, int64_t ky, int64_t kx, OutputRange ry,
               OutputRange rx, T* rows, T* pixels) {
  const int64_t per_image = ry.size() * rx.size(), width = rx.size();
#pragma omp parallel for if (g.n > 1 && g.n * per_image * (g.out + g.c) > (int64_t{1} << 16))
  for (int64_t i = 0; i < g.n; ++i) {
    for (int64_t oy = ry.first; oy < ry.end; ++oy) {
      const int64_t row = i * per_image + (oy - ry.first) * width;
      const int64_t iy = oy * g.stride - g.padding + ky, ix = rx.first * g.stride - g.padding + kx;
      if (rows != nullptr) {
        std::memcpy(rows + row * g.out, gy + ((i * g.oh + oy) * g.ow + rx.first) * g.out,
                    sizeof(T) * width * g.out);
      }
      const T* src = x + ((i * g.h + iy) * g.w + ix) * g.c;
      T* dst = pixels + row * g.c;
      if (g.stride == 1) {
        std::memcpy(dst, src, sizeof(T) * width * g.c);
      } else {
        for (int64_t j = 0; j < width; ++j)
          std::memcpy(dst + j * g.c, src + j * g.stride * g.c, sizeof(T) * g.c);
      }
    }
  }
}

template <typename T>
void ByTap(const T* x, const T* gy, const ConvGeometry& g, float* taps_first) {
  const int64_t K = g.K();
  T* rows = ThreadScratch<GatherScratch, T, 2>(0, g.n * g.P() * g.out);
  T* pixels = ThreadScratch<GatherScratch, T, 2>(1, g.n * g.P() * g.c);
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    const OutputRange ry = InsideOutputs(ky, g.h, g.oh, g);
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const OutputRange rx = InsideOutputs(kx, g.w, g.ow, g);
      float* tap = taps_first + (ky * g.kw + kx) * g.c;
      const int64_t count = g.n * ry.size() * rx.size();
      if (count == 0) {
        for (int64_t o = 0; o < g.out; ++o) std::fill(tap + o * K, tap + o * K + g.c, 0.0f);
        continue;
      }
      // A tap that every output pixel reads inside takes the output gradient as it lies.
      const bool all_pixels = count == g.n * g.P();
      GatherTap(x, gy, g, ky, kx, ry, rx, all_pixels ? nullptr : rows, pixels);
      Gemm(true, false, g.out, g.c, count, 1.0f, all_pixels ? gy : rows, g.out, pixels, g.c, 0.0f, tap, K);
    }
  }
}

}  // namespace

void SetWeightGradientAlgorithm(WeightGradientAlgorithm algorithm) { g_algorithm.store(algorithm); }

WeightGradientAlgorithm ForcedWeightGradientAlgorithm() { return g_algorithm.load(); }

double PaddedTapFraction(const ConvGeometry& g) {
  const int64_t pairs = g.P() * g.kh * g.kw;
  if (pairs == 0) return 0.0;
  int64_t inside = 0;
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      inside += InsideOutputs(ky, g.h, g.oh, g).size() * InsideOutputs(kx, g.w, g.ow, g).size();
    }
  }
  return 1.0 - static_cast<double>(inside) / static_cast<double>(pairs);
}

bool WeightGradientByTapApplies(const ConvGeometry& g, bool gemms_on_amx) {
  switch (g_algorithm.load()) {
    case WeightGradientAlgorithm::kRows:
      return false;
    case WeightGradientAlgorithm::kTaps:
      return true;
    case WeightGradientAlgorithm::kAuto:
      break;
  }
  return !gemms_on_amx && PaddedTapFraction(g) >= kMinPaddedTapFraction;
}

void WeightGradientByTap(const float* x, const float* gy, const ConvGeometry& g, float* taps_first) {
  ByTap(x, gy, g, taps_first);
}

void WeightGradientByTap(const BFloat16* x, const BFloat16* gy, const ConvGeometry& g, float* taps_first) {
  ByTap(x, gy, g, taps_first);
}

}  // namespace cpu
}  // namespace ddp
