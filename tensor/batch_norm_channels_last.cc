// BatchNorm's training passes with channels in vector lanes (contracts:
// tensor/batch_norm_channels_last.h).
//
// Note [BatchNorm over channels in lanes]
// With one value per (row, channel), as in [batch, features] or the [N*H*W, C] view of a channels-last
// activation, a channel's values are a column of the [rows, channels] matrix. The row loops of
// tensor/batch_norm_rows.h would run once per element there; these passes instead walk the rows in order
// and run each row's channels in vector lanes: every channel's double totals take its values in row
// order, one at a time, which is exactly what the row loops do with rows of one element, and every
// output element comes from the same element functions (NormalizedValue, ReluValue, InputGradValue, ...),
// so the numbers are the whole-tensor kernels' bit for bit. The passes over all rows are those of the
// whole-tensor kernels (three in forward, two in backward); threads take blocks of columns, a multiple of
// a cache line wide, so each channel's order stays the same whatever the thread count.
#include "tensor/batch_norm_channels_last.h"

#include <algorithm>
#include <vector>

#include "tensor/batch_norm_kernels.h"
#include "tensor/batch_norm_rows.h"
#include "tensor/bf16_convert.h"
#include "tensor/threads.h"

namespace ddp {
namespace batch_norm_channels_last {
namespace {

namespace rows_ = batch_norm_rows;

constexpr int64_t kParallelElements = int64_t{1} << 16;  // as the whole-tensor kernels
constexpr int64_t kColumnsPerLine = 16;                  // floats in a 64-byte cache line

// Runs f(c0, c1) for blocks of columns [c0, c1) that together cover [0, channels): one block per thread
// (each a whole number of cache lines wide) when the tensor is large enough to share, else one.
template <typename F>
void ForEachColumnBlock(int64_t rows, int64_t channels, F f) {
  const int64_t threads = rows * channels > kParallelElements ? std::max(GetNumThreads(), 1) : 1;
  const int64_t lines = (channels + kColumnsPerLine - 1) / kColumnsPerLine;
  const int64_t width = kColumnsPerLine * ((lines + threads - 1) / threads);
  const int64_t blocks = (channels + width - 1) / width;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) f(b * width, std::min(channels, (b + 1) * width));
}

// The lane mask of a ReLU mask byte: all ones where the output was positive.
inline uint32_t LaneOf(uint8_t mask_byte) { return mask_byte != 0 ? ~uint32_t{0} : 0u; }

// The output pass over columns [c0, c1): y = x * scale + shift, or with `relu` relu(... + residual) with
// the bf16 copy and mask where `a` has them; scale[j] and shift[j] are column c0 + j's.
// An AVX-512 clone beside the default: twice the lanes.
__attribute__((target_clones("arch=x86-64-v4", "default"))) void NormalizeBlock(
    int64_t rows, int64_t channels, int64_t c0, int64_t c1, const float* scale, const float* shift, bool relu,
    const ForwardArrays& a) {
  const int64_t width = c1 - c0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * channels + c0;
    const float* x = a.x + base;
    float* y = a.y + base;
    if (!relu) {
      for (int64_t j = 0; j < width; ++j) y[j] = rows_::NormalizedValue(x[j], scale[j], shift[j]);
      continue;
    }
    if (a.residual == nullptr) {
      for (int64_t j = 0; j < width; ++j)
        y[j] = rows_::ReluValue(rows_::NormalizedValue(x[j], scale[j], shift[j]));
    } else {
      const float* res = a.residual + base;
      for (int64_t j = 0; j < width; ++j) {
        y[j] = rows_::ReluValue(rows_::SumValue(rows_::NormalizedValue(x[j], scale[j], shift[j]), res[j]));
      }
    }
    if (a.copy != nullptr) cpu::FloatToBFloat16Inline(y, a.copy + base, width);
    if (a.mask != nullptr) {
      uint8_t* m = a.mask + base;
      for (int64_t j = 0; j < width; ++j) m[j] = static_cast<uint8_t>(y[j] > 0.0f);
    }
  }
}

// An AVX-512 clone beside the default: the double totals take half the instructions.
__attribute__((target_clones("arch=x86-64-v4", "default"))) void ForwardBlock(int64_t rows, int64_t channels,
                                                                              int64_t c0, int64_t c1,
                                                                              float eps, const Tensor& weight,
                                                                              const Tensor& bias, bool relu,
                                                                              const ForwardArrays& a) {
  const int64_t width = c1 - c0;
  std::vector<double> totals(width, 0.0), mean(width);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = a.x + r * channels + c0;
    for (int64_t j = 0; j < width; ++j) totals[j] += x[j];
  }
  for (int64_t j = 0; j < width; ++j) {
    a.mean[c0 + j] = rows_::DividedByCount(static_cast<float>(totals[j]), rows);
    mean[j] = a.mean[c0 + j];
    totals[j] = 0.0;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = a.x + r * channels + c0;
    for (int64_t j = 0; j < width; ++j) totals[j] += (x[j] - mean[j]) * (x[j] - mean[j]);
  }
  std::vector<float> scale(width), shift(width);
  for (int64_t j = 0; j < width; ++j) {
    const int64_t ch = c0 + j;
    a.var[ch] = rows_::DividedByCount(static_cast<float>(totals[j]), rows);
    a.invstd[ch] = rows_::InverseStdOf(a.var[ch], eps);
    const rows_::AffineCoefficients f = rows_::AffineOf(
        a.mean[ch], a.invstd[ch], ChannelValueOr(weight, ch, 1.0f), ChannelValueOr(bias, ch, 0.0f));
    scale[j] = f.a;
    shift[j] = f.b;
  }
  NormalizeBlock(rows, channels, c0, c1, scale.data(), shift.data(), relu, a);
}

// An AVX-512 clone beside the default: the double totals take half the instructions.
__attribute__((target_clones("arch=x86-64-v4", "default"))) void BackwardBlock(int64_t rows, int64_t channels,
                                                                               int64_t c0, int64_t c1,
                                                                               const Tensor& weight,
                                                                               const BackwardArrays& a) {
  const int64_t width = c1 - c0;
  std::vector<double> total_g(width, 0.0), total_gx(width, 0.0), mean(a.mean + c0, a.mean + c1);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * channels + c0;
    const float* gy = a.gy + base;
    const float* x = a.x + base;
    if (a.mask == nullptr) {
      for (int64_t j = 0; j < width; ++j) {
        total_g[j] += gy[j];
        total_gx[j] += gy[j] * (x[j] - mean[j]);
      }
      continue;
    }
    const uint8_t* m = a.mask + base;
    float* masked = a.masked != nullptr ? a.masked + base : nullptr;
    for (int64_t j = 0; j < width; ++j) {
      const float g = rows_::ReluMask(gy[j], LaneOf(m[j]));
      if (masked != nullptr) masked[j] = g;
      total_g[j] += g;
      total_gx[j] += g * (x[j] - mean[j]);
    }
  }
  std::vector<float> k(width), slope(width), offset(width);
  for (int64_t j = 0; j < width; ++j) {
    const int64_t ch = c0 + j;
    a.sum_g[ch] = static_cast<float>(total_g[j]);
    a.sum_gx[ch] = static_cast<float>(total_gx[j]);
    const rows_::InputGradCoefficients f = rows_::InputGradOf(a.invstd[ch], ChannelValueOr(weight, ch, 1.0f),
                                                              a.sum_g[ch], a.sum_gx[ch], rows, true);
    k[j] = f.k;
    slope[j] = f.a;
    offset[j] = f.b;
  }
  const float* mean_f = a.mean + c0;
  std::vector<float> row_gx(a.gx == nullptr ? width : 0);  // a row's gradient where only its copy is kept
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * channels + c0;
    const float* x = a.x + base;
    float* gx = a.gx != nullptr ? a.gx + base : row_gx.data();
    if (a.masked != nullptr || a.mask == nullptr) {
      const float* g = a.masked != nullptr ? a.masked + base : a.gy + base;
      for (int64_t j = 0; j < width; ++j)
        gx[j] = rows_::InputGradValue(g[j], x[j], k[j], slope[j], offset[j], mean_f[j]);
    } else {
      const float* gy = a.gy + base;
      const uint8_t* m = a.mask + base;
      for (int64_t j = 0; j < width; ++j) {
        gx[j] = rows_::InputGradValue(rows_::ReluMask(gy[j], LaneOf(m[j])), x[j], k[j], slope[j], offset[j],
                                      mean_f[j]);
      }
    }
    if (a.gx_copy != nullptr) cpu::FloatToBFloat16Inline(gx, a.gx_copy + base, width);
  }
}

}  // namespace

void TrainingForward(int64_t rows, int64_t channels, float eps, const Tensor& weight, const Tensor& bias,
                     bool relu, const ForwardArrays& arrays) {
  ForEachColumnBlock(rows, channels, [&](int64_t c0, int64_t c1) {
    ForwardBlock(rows, channels, c0, c1, eps, weight, bias, relu, arrays);
  });
}

void Normalize(int64_t rows, int64_t channels, const batch_norm_rows::AffineCoefficients* affine, bool relu,
               const ForwardArrays& arrays) {
  ForEachColumnBlock(rows, channels, [&](int64_t c0, int64_t c1) {
    std::vector<float> scale(c1 - c0), shift(c1 - c0);
    for (int64_t j = 0; j < c1 - c0; ++j) {
      scale[j] = affine[c0 + j].a;
      shift[j] = affine[c0 + j].b;
    }
    NormalizeBlock(rows, channels, c0, c1, scale.data(), shift.data(), relu, arrays);
  });
}

void TrainingBackward(int64_t rows, int64_t channels, const Tensor& weight, const BackwardArrays& arrays) {
  ForEachColumnBlock(rows, channels,
                     [&](int64_t c0, int64_t c1) { BackwardBlock(rows, channels, c0, c1, weight, arrays); });
}

}  // namespace batch_norm_channels_last
}  // namespace ddp
