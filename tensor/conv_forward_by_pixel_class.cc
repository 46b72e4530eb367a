// Channels-last forward convolutions by pixel class (contracts and Note [Forward by pixel class]:
// tensor/conv_forward_by_pixel_class.h).
#include "tensor/conv_forward_by_pixel_class.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "tensor/conv_weight_gradient_by_tap.h"
#include "tensor/cpu_gemm.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/thread_scratch.h"

namespace ddp {
namespace cpu {
namespace {

std::atomic<ForwardAlgorithm> g_algorithm{ForwardAlgorithm::kAuto};

// Unfolded rows per group of images: the classes' products are GEMMs of a few output pixels per image, so
// a group spans many images (ResNet-18's layer3 and layer4 at batch 64 in one group).
constexpr int64_t kGroupBytes = int64_t{16} << 20;

// Output positions [first, end) along one axis whose taps read inside the input for kernel offsets
// [k0, k1) (k0 == k1: none).
struct AxisRun {
  int64_t first, end, k0, k1;
  int64_t size() const { return end - first; }
  int64_t taps() const { return k1 - k0; }
};

// The maximal runs of output positions with the same inside kernel offsets, along an axis of `size` input
// positions, `outputs` output positions and a kernel of `kernel` offsets.
std::vector<AxisRun> AxisRuns(int64_t size, int64_t outputs, int64_t kernel, const ConvGeometry& g) {
  std::vector<AxisRun> runs;
  for (int64_t o = 0; o < outputs; ++o) {
    const int64_t start = o * g.stride - g.padding;  // the input position of kernel offset 0
    const int64_t k0 = std::clamp<int64_t>(-start, 0, kernel);
    const int64_t k1 = std::max(k0, std::clamp<int64_t>(size - start, 0, kernel));
    if (!runs.empty() && runs.back().k0 == k0 && runs.back().k1 == k1) {
      runs.back().end = o + 1;
    } else {
      runs.push_back({o, o + 1, k0, k1});
    }
  }
  return runs;
}

// Owner of the per-thread scratch: slot 0 a class's unfolded rows, slot 1 its products.
struct ClassScratch {};

// The rows [count * |rows| * |cols|, rows.taps() * cols.taps() * c] of the class (rows, cols) of images
// [first, first + count): per pixel, kernel row by kernel row, the channels of the inside taps' pixels.
template <typename T>
void UnfoldClass(const T* x, const ConvGeometry& g, int64_t first, int64_t count, const AxisRun& rows,
                 const AxisRun& cols, T* a) {
  const int64_t run = cols.taps() * g.c, width = rows.taps() * run;
#pragma omp parallel for if (count > 1 && count * rows.size() * cols.size() * width > (int64_t{1} << 16))
  for (int64_t i = 0; i < count; ++i) {
    const T* image = x + (first + i) * g.h * g.w * g.c;
    for (int64_t oy = rows.first; oy < rows.end; ++oy) {
      for (int64_t ox = cols.first; ox < cols.end; ++ox) {
        T* row = a + ((i * rows.size() + oy - rows.first) * cols.size() + ox - cols.first) * width;
        const int64_t ix = ox * g.stride - g.padding + cols.k0;
        for (int64_t ky = rows.k0; ky < rows.k1; ++ky) {
          const int64_t iy = oy * g.stride - g.padding + ky;
          std::memcpy(static_cast<void*>(row + (ky - rows.k0) * run), image + (iy * g.w + ix) * g.c,
                      run * sizeof(T));
        }
      }
    }
  }
}

// y's rows of the class (rows, cols) of images [first, first + count) = the class's products + b.
void ScatterClass(const float* products, const float* b, const ConvGeometry& g, int64_t first, int64_t count,
                  const AxisRun& rows, const AxisRun& cols, float* y) {
#pragma omp parallel for if (count > 1 && count * rows.size() * cols.size() * g.out > (int64_t{1} << 16))
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t oy = rows.first; oy < rows.end; ++oy) {
      const float* src = products + ((i * rows.size() + oy - rows.first) * cols.size()) * g.out;
      float* dst = y + (((first + i) * g.oh + oy) * g.ow + cols.first) * g.out;
      if (b == nullptr) {
        std::memcpy(dst, src, cols.size() * g.out * sizeof(float));
        continue;
      }
      for (int64_t p = 0; p < cols.size(); ++p) {
        for (int64_t o = 0; o < g.out; ++o) dst[p * g.out + o] = src[p * g.out + o] + b[o];
      }
    }
  }
}

// products [m, out] = the class's unfolded rows a times the weights of its inside taps.
template <typename T>
void ClassProducts(const T* a, const T* taps_first, const ConvGeometry& g, int64_t m, const AxisRun& rows,
                   const AxisRun& cols, float* products) {
  const int64_t K = g.K(), run = cols.taps() * g.c, width = rows.taps() * run;
  if (width == 0) {
    std::fill(products, products + m * g.out, 0.0f);
  } else if (cols.taps() == g.kw) {  // whole kernel rows: one block of weight columns
    Gemm(false, true, m, g.out, width, 1.0f, a, width, taps_first + rows.k0 * g.kw * g.c, K, 0.0f, products,
         g.out);
  } else {
    for (int64_t ky = rows.k0; ky < rows.k1; ++ky) {
      Gemm(false, true, m, g.out, run, 1.0f, a + (ky - rows.k0) * run, width,
           taps_first + (ky * g.kw + cols.k0) * g.c, K, ky == rows.k0 ? 0.0f : 1.0f, products, g.out);
    }
  }
}

template <typename T>
void ByPixelClass(const T* x, const T* taps_first, const float* b, const ConvGeometry& g, float* y) {
  const std::vector<AxisRun> row_runs = AxisRuns(g.h, g.oh, g.kh, g);
  const std::vector<AxisRun> col_runs = AxisRuns(g.w, g.ow, g.kw, g);
  const int64_t image_bytes = std::max<int64_t>(g.P() * g.K() * static_cast<int64_t>(sizeof(T)), 1);
  const int64_t group = std::clamp<int64_t>(kGroupBytes / image_bytes, 1, std::max<int64_t>(g.n, 1));
  for (int64_t first = 0; first < g.n; first += group) {
    const int64_t count = std::min(group, g.n - first);
    for (const AxisRun& rows : row_runs) {
      for (const AxisRun& cols : col_runs) {
        const int64_t m = count * rows.size() * cols.size();
        T* a = ThreadScratch<ClassScratch, T, 2>(0, m * rows.taps() * cols.taps() * g.c);
        float* products = ThreadScratch<ClassScratch, float, 2>(1, m * g.out);
        if (rows.taps() > 0 && cols.taps() > 0) UnfoldClass(x, g, first, count, rows, cols, a);
        ClassProducts(a, taps_first, g, m, rows, cols, products);
        ScatterClass(products, b, g, first, count, rows, cols, y);
      }
    }
  }
}

}  // namespace

void SetForwardAlgorithm(ForwardAlgorithm algorithm) { g_algorithm.store(algorithm); }

ForwardAlgorithm ForcedForwardAlgorithm() { return g_algorithm.load(); }

bool ForwardByPixelClassApplies(const ConvGeometry& g, bool gemms_on_amx) {
  switch (g_algorithm.load()) {
    case ForwardAlgorithm::kRows:
      return false;
    case ForwardAlgorithm::kClasses:
      return true;
    case ForwardAlgorithm::kAuto:
      break;
  }
  return !gemms_on_amx && PaddedTapFraction(g) >= kMinPaddedTapFraction;
}

void ForwardByPixelClass(const float* x, const float* taps_first, const float* b, const ConvGeometry& g,
                         float* y) {
  ByPixelClass(x, taps_first, b, g, y);
}

void ForwardByPixelClass(const BFloat16* x, const BFloat16* taps_first, const float* b, const ConvGeometry& g,
                         float* y) {
  ByPixelClass(x, taps_first, b, g, y);
}

}  // namespace cpu
}  // namespace ddp
