// The row loops of BatchNorm's CPU kernels, shared by the whole-tensor kernels (tensor/batch_norm_kernels.cc)
// and the channel-blocked passes (tensor/batch_norm_blocked.cc). A row is x[i, ch, :] of a contiguous
// [n, c, inner] tensor: `inner` contiguous floats. Every kernel computes each number with these functions,
// so the kernels agree bit for bit whatever order they visit rows in, provided a channel's sums take its
// rows in order i = 0, 1, ..., each row folded into the channel's running double totals.
#ifndef DDP_TENSOR_BATCH_NORM_ROWS_H_
#define DDP_TENSOR_BATCH_NORM_ROWS_H_

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tensor/bf16_convert.h"
#include "tensor/dtype.h"
#include "tensor/functors.h"

namespace ddp {
namespace batch_norm_rows {

// total + Σ x[j] over the row, in double lanes folded into `total` at the row's end.
inline double AddRowSum(double total, const float* x, int64_t inner) {
#pragma omp simd reduction(+ : total)
  for (int64_t j = 0; j < inner; ++j) total += x[j];
  return total;
}

// total + Σ (x[j] - mean)^2 over the row, as AddRowSum.
inline double AddRowSquaredDeviations(double total, const float* x, int64_t inner, double mean) {
#pragma omp simd reduction(+ : total)
  for (int64_t j = 0; j < inner; ++j) total += (x[j] - mean) * (x[j] - mean);
  return total;
}

// The per-channel statistics from the channel's float32 sums, as BatchNormBatchStats rounds them: the mean
// and the biased variance are sum / count through MulScalar's float multiply by 1 / count, invstd is
// InverseStd's.
inline float DividedByCount(float sum, int64_t count) {
  return functors::MulScalar{static_cast<float>(1.0 / static_cast<double>(count))}(sum);
}
inline float InverseStdOf(float var, float eps) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(var) + eps));
}

// y = x * a + b: the affine map of Note [BatchNorm pieces] with a = invstd * weight and b = bias - mean * a
// computed in double (AffineOf) and rounded to float.
struct AffineCoefficients {
  float a, b;
};
inline AffineCoefficients AffineOf(float mean, float invstd, float weight, float bias) {
  const double a = static_cast<double>(invstd) * weight;
  return {static_cast<float>(a), static_cast<float>(bias - mean * a)};
}

// The element formulas Normalize and NormalizeAddRelu share, each rounded as its own op rounds it (the
// fused kernel gives what BatchNorm, Add and Relu give one after another): the affine map (contracted
// to one fused multiply-add where the compiler does so, alike in every kernel), the sum, and ReLU as
// functors::Relu (tests check the fused kernel against the three ops bit for bit).
inline float NormalizedValue(float x, float a, float b) { return x * a + b; }
// No multiply: nothing for the compiler to contract.
inline float SumValue(float v, float r) { return v + r; }
inline float ReluValue(float v) { return functors::Relu()(v); }

// y = Normalize's row.
inline void NormalizeRow(const float* x, int64_t inner, AffineCoefficients f, float* y) {
  for (int64_t j = 0; j < inner; ++j) y[j] = NormalizedValue(x[j], f.a, f.b);
}

// Note [ReLU mask bits]
// The backward of relu(...) needs only where its output was positive. BatchNormAddRelu keeps that as one
// bit per element, written by the forward pass from the row it has just computed (RowMaskBits), instead
// of keeping the float32 output for backward: the backward sums read 1/32 of the bytes for the mask, and
// the output's memory goes when its consumers are done with it. The bits are those of `y > 0` (NaN: 0),
// so the masked gradient is bit for bit ReluMask's.
inline void RowMaskBits(const float* y, int64_t inner, uint8_t* out) {
  int64_t j = 0;
  for (; j + 8 <= inner; j += 8) {
    const __m256 positive = _mm256_cmp_ps(_mm256_loadu_ps(y + j), _mm256_setzero_ps(), _CMP_GT_OQ);
    out[j / 8] = static_cast<uint8_t>(_mm256_movemask_ps(positive));
  }
  if (j == inner) return;
  uint8_t last = 0;
  for (int64_t k = 0; j + k < inner; ++k) last |= static_cast<uint8_t>(y[j + k] > 0.0f) << k;
  out[j / 8] = last;
}

// The mask of a row as 32-bit lanes (all ones where the bit is set) in out[0, 8 * row_bytes).
inline void ExpandRowMask(const uint8_t* bits, int64_t row_bytes, uint32_t* out) {
  const __m256i lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  for (int64_t k = 0; k < row_bytes; ++k) {
    const __m256i picked = _mm256_and_si256(_mm256_set1_epi32(bits[k]), lanes);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8 * k), _mm256_cmpeq_epi32(picked, lanes));
  }
}

// y = relu(Normalize's row + residual's row) (residual null: nothing added); with `copy` the row rounded
// to bf16 there (Note [Autocast copies from the producer]), and with `mask` its ReLU mask bits, each
// written while the row is in cache.
inline void NormalizeAddReluRow(const float* x, const float* residual, int64_t inner, AffineCoefficients f,
                                float* y, BFloat16* copy, uint8_t* mask) {
  if (residual == nullptr) {
    for (int64_t j = 0; j < inner; ++j) y[j] = ReluValue(NormalizedValue(x[j], f.a, f.b));
  } else {
    for (int64_t j = 0; j < inner; ++j)
      y[j] = ReluValue(SumValue(NormalizedValue(x[j], f.a, f.b), residual[j]));
  }
  if (copy != nullptr) cpu::FloatToBFloat16Run(y, copy, inner);
  if (mask != nullptr && inner > 0) RowMaskBits(y, inner, mask);
}

// functors::ReluBackward(grad, output) (grad where output > 0, else +0), bit for bit, given the output's
// mask lane (all ones where output > 0, else 0) as a select on the bits: a branch in the loop body would
// keep the compiler from vectorising the sums.
inline float ReluMask(float grad, uint32_t positive) {
  uint32_t bits;
  std::memcpy(&bits, &grad, sizeof(bits));
  bits &= positive;
  float masked;
  std::memcpy(&masked, &bits, sizeof(masked));
  return masked;
}

// Running totals of Σ g and Σ g * (x - mean) over one channel's rows.
struct BackwardTotals {
  double g = 0.0, gx = 0.0;
};

// Folds the row's output gradient g into `totals`: g is the row of `gy` when `lanes` is null, else
// ReluMask(gy, lanes) (ExpandRowMask's lanes of the row), which is also written to `masked` unless that is
// null. One loop shape for all, vectorised with the same double lanes, so the masked sums are those of
// masking first and summing after.
inline void AddRowBackwardSums(const float* gy, const uint32_t* lanes, float* masked, const float* x,
                               int64_t inner, double mean, BackwardTotals& totals) {
  double total_g = totals.g, total_gx = totals.gx;
  if (lanes == nullptr) {
#pragma omp simd reduction(+ : total_g, total_gx)
    for (int64_t j = 0; j < inner; ++j) {
      total_g += gy[j];
      total_gx += gy[j] * (x[j] - mean);
    }
  } else if (masked == nullptr) {
#pragma omp simd reduction(+ : total_g, total_gx)
    for (int64_t j = 0; j < inner; ++j) {
      const float g = ReluMask(gy[j], lanes[j]);
      total_g += g;
      total_gx += g * (x[j] - mean);
    }
  } else {
#pragma omp simd reduction(+ : total_g, total_gx)
    for (int64_t j = 0; j < inner; ++j) {
      const float g = ReluMask(gy[j], lanes[j]);
      masked[j] = g;
      total_g += g;
      total_gx += g * (x[j] - mean);
    }
  }
  totals = {total_g, total_gx};
}

// gx = k * g + a * (x - mean) + b: InputGrad's per-channel coefficients (Note [BatchNorm pieces]) from the
// channel's float32 sums {Σg, Σ g (x - mean)} over `count` values; without `training` a = b = 0.
struct InputGradCoefficients {
  float k, a, b;
};
inline InputGradCoefficients InputGradOf(float invstd, float weight, float sum_g, float sum_gx, int64_t count,
                                         bool training) {
  const double is = invstd, kk = weight * is;
  if (!training) return {static_cast<float>(kk), 0.0f, 0.0f};
  return {static_cast<float>(kk), static_cast<float>(-kk * is * is * sum_gx / static_cast<double>(count)),
          static_cast<float>(-kk * sum_g / static_cast<double>(count))};
}

// One element of the input gradient, as every kernel rounds it (contracted alike wherever it is inlined).
inline float InputGradValue(float g, float x, float k, float a, float b, float mean) {
  return k * g + a * (x - mean) + b;
}

// The input gradient's row.
inline void InputGradRow(const float* g, const float* x, int64_t inner, InputGradCoefficients f, float mean,
                         float* gx) {
  for (int64_t j = 0; j < inner; ++j) gx[j] = InputGradValue(g[j], x[j], f.k, f.a, f.b, mean);
}

// InputGradRow of g = ReluMask(gy, lanes) (AddRowBackwardSums' masked gradient), without storing g.
inline void MaskedInputGradRow(const float* gy, const uint32_t* lanes, const float* x, int64_t inner,
                               InputGradCoefficients f, float mean, float* gx) {
  for (int64_t j = 0; j < inner; ++j)
    gx[j] = InputGradValue(ReluMask(gy[j], lanes[j]), x[j], f.k, f.a, f.b, mean);
}

}  // namespace batch_norm_rows
}  // namespace ddp

#endif  // DDP_TENSOR_BATCH_NORM_ROWS_H_
