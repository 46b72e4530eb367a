// BatchNorm's per-channel kernels (contracts: tensor/batch_norm_kernels.h). Each runs its CUDA kernel
// when the input is on a GPU and the CPU loop below otherwise; the CPU loops use OpenMP above 64 Ki
// elements.
#include "tensor/batch_norm_kernels.h"

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "tensor/bf16_convert.h"
#include "tensor/functors.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/op_util.h"
#endif

namespace ddp {
namespace {

constexpr int64_t kParallelElements = int64_t{1} << 16;

// Element ch of a [c] tensor of any stride, or `fallback` when it is undefined.
float At(const Tensor& t, int64_t ch, float fallback) {
  return t.defined() ? t.data<float>()[ch * t.strides()[0]] : fallback;
}

// Runs f(ch, offset) for every row x[i, ch, :] of `s` (offset of its first element), rows in parallel.
template <typename F>
void ForEachRow(const BatchNormShape& s, F f) {
#pragma omp parallel for collapse(2) if (s.n * s.c * s.inner > kParallelElements)
  for (int64_t i = 0; i < s.n; ++i) {
    for (int64_t ch = 0; ch < s.c; ++ch) f(ch, (i * s.c + ch) * s.inner);
  }
}

// y = x * scale[c] + shift[c] (Note [BatchNorm pieces]), the factors computed in double.
struct Affine {
  std::vector<float> scale, shift;
};
Affine AffineOf(int64_t c, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                const Tensor& bias) {
  Affine affine{std::vector<float>(c), std::vector<float>(c)};
  for (int64_t ch = 0; ch < c; ++ch) {
    const double a = static_cast<double>(At(invstd, ch, 1.0f)) * At(weight, ch, 1.0f);
    affine.scale[ch] = static_cast<float>(a);
    affine.shift[ch] = static_cast<float>(At(bias, ch, 0.0f) - At(mean, ch, 0.0f) * a);
  }
  return affine;
}

// The element formulas Normalize and NormalizeAddRelu share, each rounded as its own op rounds it (the
// fused kernel gives what BatchNorm, Add and Relu give one after another): the affine map (contracted
// to one fused multiply-add where the compiler does so, alike in both kernels), the sum, and ReLU as
// functors::Relu (tests check the fused kernel against the three ops bit for bit).
inline float NormalizedValue(float x, float a, float b) { return x * a + b; }
// No multiply: nothing for the compiler to contract.
inline float SumValue(float v, float r) { return v + r; }
inline float ReluValue(float v) { return functors::Relu()(v); }

#ifdef DDP_WITH_CUDA
float* PointerOrNull(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
int64_t StrideOrZero(const Tensor& t) { return t.defined() ? t.strides()[0] : 0; }
#endif

}  // namespace

BatchNormShape BatchNormShapeOf(const Tensor& x) {
  const int64_t n = x.shape()[0], c = x.shape()[1];
  return {n, c, c == 0 || n == 0 ? 0 : x.numel() / (n * c)};
}

void ChannelSumsInto(const Tensor& x, const Tensor& mean, const Tensor& out) {
  const BatchNormShape s = BatchNormShapeOf(x);
  const float* px = x.data<float>();
  const float* pm = mean.defined() ? mean.data<float>() : nullptr;
  float* po = out.data<float>();
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) {
    cuda::DeviceGuard guard(x.device().index);
    DDP_CUDA_CHECK(cuda::kernels::BatchNormChannelSums(px, s.n, s.c, s.inner, pm, po, cuda::StreamOf(x)));
    return;
  }
#endif
#pragma omp parallel for if (s.n * s.c * s.inner > kParallelElements)
  for (int64_t ch = 0; ch < s.c; ++ch) {
    const double m = pm != nullptr ? pm[ch] : 0.0;
    double total = 0.0;
    for (int64_t i = 0; i < s.n; ++i) {
      const float* p = px + (i * s.c + ch) * s.inner;
      if (pm == nullptr) {
#pragma omp simd reduction(+ : total)
        for (int64_t j = 0; j < s.inner; ++j) total += p[j];
        continue;
      }
#pragma omp simd reduction(+ : total)
      for (int64_t j = 0; j < s.inner; ++j) total += (p[j] - m) * (p[j] - m);
    }
    po[ch] = static_cast<float>(total);
  }
}

Tensor InverseStd(const Tensor& var, float eps) {
  const int64_t c = var.shape()[0];
  Tensor out = Tensor::Empty({c}, DType::kFloat32, var.device());
#ifdef DDP_WITH_CUDA
  if (var.device().is_cuda()) {
    cuda::DeviceGuard guard(var.device().index);
    DDP_CUDA_CHECK(cuda::kernels::BatchNormInvStd(var.data<float>(), var.strides()[0], c, eps,
                                                  out.data<float>(), cuda::StreamOf(var)));
    return out;
  }
#endif
  for (int64_t ch = 0; ch < c; ++ch) {
    out.data<float>()[ch] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(At(var, ch, 1.0f)) + eps));
  }
  return out;
}

void UpdateRunning(const Tensor& running_mean, const Tensor& running_var, const Tensor& mean,
                   const Tensor& var, int64_t count, float momentum) {
  const int64_t c = mean.shape()[0];
#ifdef DDP_WITH_CUDA
  if (mean.device().is_cuda()) {
    cuda::DeviceGuard guard(mean.device().index);
    DDP_CUDA_CHECK(cuda::kernels::BatchNormUpdateRunning(
        PointerOrNull(running_mean), StrideOrZero(running_mean), PointerOrNull(running_var),
        StrideOrZero(running_var), mean.data<float>(), var.data<float>(), c, count, momentum,
        cuda::StreamOf(mean)));
    return;
  }
#endif
  const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
  for (int64_t ch = 0; ch < c; ++ch) {
    if (running_mean.defined()) {
      float& r = running_mean.data<float>()[ch * running_mean.strides()[0]];
      r = static_cast<float>((1.0 - momentum) * r + momentum * At(mean, ch, 0.0f));
    }
    if (running_var.defined()) {
      float& r = running_var.data<float>()[ch * running_var.strides()[0]];
      r = static_cast<float>((1.0 - momentum) * r + momentum * At(var, ch, 0.0f) * unbias);
    }
  }
}

Tensor Normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                 const Tensor& bias) {
  const BatchNormShape s = BatchNormShapeOf(x);
  Tensor y = Tensor::Empty(x.shape(), DType::kFloat32, x.device());
  const float* px = x.data<float>();
  float* py = y.data<float>();
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) {
    cuda::DeviceGuard guard(x.device().index);
    DDP_CUDA_CHECK(cuda::kernels::BatchNormApply(
        px, s.n, s.c, s.inner, mean.data<float>(), invstd.data<float>(), PointerOrNull(weight),
        StrideOrZero(weight), PointerOrNull(bias), StrideOrZero(bias), py, cuda::StreamOf(x)));
    return y;
  }
#endif
  const Affine affine = AffineOf(s.c, mean, invstd, weight, bias);
  ForEachRow(s, [&](int64_t ch, int64_t base) {
    const float a = affine.scale[ch], b = affine.shift[ch];
    for (int64_t j = 0; j < s.inner; ++j) py[base + j] = NormalizedValue(px[base + j], a, b);
  });
  return y;
}

namespace {

// Note [ReLU mask bits]
// The backward of relu(...) needs only where its output was positive. BatchNormAddRelu keeps that as one
// bit per element, written by the forward pass from the row it has just computed (RowMaskBits), instead
// of keeping the float32 output for backward: the backward sums read 1/32 of the bytes for the mask, and
// the output's memory goes when its consumers are done with it. The bits are those of `y > 0` (NaN: 0),
// so the masked gradient is bit for bit ReluMask's.
void RowMaskBits(const float* y, int64_t inner, uint8_t* out) {
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
void ExpandRowMask(const uint8_t* bits, int64_t row_bytes, uint32_t* out) {
  const __m256i lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  for (int64_t k = 0; k < row_bytes; ++k) {
    const __m256i picked = _mm256_and_si256(_mm256_set1_epi32(bits[k]), lanes);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8 * k), _mm256_cmpeq_epi32(picked, lanes));
  }
}

}  // namespace

Tensor NormalizeAddRelu(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias, const Tensor& residual, const Tensor& bf16_copy,
                        ReluMaskBits* relu_mask) {
  DDP_CHECK(x.device().is_cpu()) << "NormalizeAddRelu runs on the CPU only";
  DDP_CHECK(!bf16_copy.defined() || (bf16_copy.dtype() == DType::kBFloat16 &&
                                     bf16_copy.shape() == x.shape() && bf16_copy.is_contiguous()))
      << "NormalizeAddRelu: the bf16 copy must be a contiguous bfloat16 tensor of shape "
      << ShapeToString(x.shape());
  const BatchNormShape s = BatchNormShapeOf(x);
  Tensor y = Tensor::Empty(x.shape(), DType::kFloat32, x.device());
  const float* px = x.data<float>();
  const float* pr = residual.defined() ? residual.data<float>() : nullptr;
  float* py = y.data<float>();
  BFloat16* pb = bf16_copy.defined() ? bf16_copy.data<BFloat16>() : nullptr;
  uint8_t* pmask = nullptr;
  const int64_t row_bytes = (s.inner + 7) / 8;
  if (relu_mask != nullptr) {
    relu_mask->row_bytes = row_bytes;
    relu_mask->bits.resize(static_cast<size_t>(s.n * s.c * row_bytes));
    pmask = relu_mask->bits.data();
  }
  const Affine affine = AffineOf(s.c, mean, invstd, weight, bias);
  ForEachRow(s, [&](int64_t ch, int64_t base) {
    const float a = affine.scale[ch], b = affine.shift[ch];
    if (pr == nullptr) {
      for (int64_t j = 0; j < s.inner; ++j) py[base + j] = ReluValue(NormalizedValue(px[base + j], a, b));
    } else {
      for (int64_t j = 0; j < s.inner; ++j) {
        py[base + j] = ReluValue(SumValue(NormalizedValue(px[base + j], a, b), pr[base + j]));
      }
    }
    // Rounded and masked while the row is in cache (Notes [Autocast copies from the producer], [ReLU mask
    // bits]).
    if (pb != nullptr) cpu::FloatToBFloat16Run(py + base, pb + base, s.inner);
    if (pmask != nullptr && s.inner > 0) RowMaskBits(py + base, s.inner, pmask + base / s.inner * row_bytes);
  });
  return y;
}

namespace {

// functors::ReluBackward(grad, output) (grad where output > 0, else +0), bit for bit, given the output's
// mask lane (all ones where output > 0, else 0) as a select on the bits: a branch in the loop body would
// keep the compiler from vectorising BackwardSumsLoop.
inline float ReluMask(float grad, uint32_t positive) {
  uint32_t bits;
  std::memcpy(&bits, &grad, sizeof(bits));
  bits &= positive;
  float masked;
  std::memcpy(&masked, &bits, sizeof(masked));
  return masked;
}

// sums = {Σ g, Σ g * (x - mean)} per channel over the output gradient g: gy itself when `mask` is null,
// else ReluMask(gy, the mask's lane), which is also written to `masked`. One loop shape for both, each
// vectorised with the same double accumulators, so the masked sums are those of masking first and summing
// after.
void BackwardSumsLoop(const BatchNormShape& s, const float* pg, const ReluMaskBits* mask, float* pmasked,
                      const float* px, const float* pm, float* sum_g, float* sum_gx) {
#pragma omp parallel for if (s.n * s.c * s.inner > kParallelElements)
  for (int64_t ch = 0; ch < s.c; ++ch) {
    double total_g = 0.0, total_gx = 0.0;
    const double m = pm[ch];
    thread_local std::vector<uint32_t> positive;  // this row's mask as lanes, reused across calls
    if (mask != nullptr) positive.resize(static_cast<size_t>(8 * mask->row_bytes));
    for (int64_t i = 0; i < s.n; ++i) {
      const int64_t base = (i * s.c + ch) * s.inner;
      if (mask == nullptr) {
#pragma omp simd reduction(+ : total_g, total_gx)
        for (int64_t j = 0; j < s.inner; ++j) {
          total_g += pg[base + j];
          total_gx += pg[base + j] * (px[base + j] - m);
        }
        continue;
      }
      ExpandRowMask(mask->bits.data() + (i * s.c + ch) * mask->row_bytes, mask->row_bytes, positive.data());
      const uint32_t* lanes = positive.data();
#pragma omp simd reduction(+ : total_g, total_gx)
      for (int64_t j = 0; j < s.inner; ++j) {
        const float g = ReluMask(pg[base + j], lanes[j]);
        pmasked[base + j] = g;
        total_g += g;
        total_gx += g * (px[base + j] - m);
      }
    }
    sum_g[ch] = static_cast<float>(total_g);
    sum_gx[ch] = static_cast<float>(total_gx);
  }
}

}  // namespace

void BackwardSumsInto(const Tensor& gy, const Tensor& x, const Tensor& mean, const Tensor& sums) {
  const BatchNormShape s = BatchNormShapeOf(x);
  const float* pg = gy.data<float>();
  const float* px = x.data<float>();
  const float* pm = mean.data<float>();
  float* sum_g = sums.data<float>();
  float* sum_gx = sum_g + s.c;
#ifdef DDP_WITH_CUDA
  if (gy.device().is_cuda()) {
    cuda::DeviceGuard guard(gy.device().index);
    DDP_CUDA_CHECK(cuda::kernels::BatchNormBackwardSums(pg, px, pm, s.n, s.c, s.inner, sum_g, sum_gx,
                                                        cuda::StreamOf(gy)));
    return;
  }
#endif
  BackwardSumsLoop(s, pg, nullptr, nullptr, px, pm, sum_g, sum_gx);
}

void ReluMaskedBackwardSumsInto(const Tensor& gy, const ReluMaskBits& relu_mask, const Tensor& x,
                                const Tensor& mean, const Tensor& masked, const Tensor& sums) {
  DDP_CHECK(x.device().is_cpu()) << "ReluMaskedBackwardSumsInto runs on the CPU only";
  const BatchNormShape s = BatchNormShapeOf(x);
  DDP_CHECK(relu_mask.row_bytes == (s.inner + 7) / 8 &&
            static_cast<int64_t>(relu_mask.bits.size()) == s.n * s.c * relu_mask.row_bytes)
      << "ReluMaskedBackwardSumsInto: the ReLU mask does not have the shape of " << ShapeToString(x.shape());
  const float* pg = gy.data<float>();
  float* pmasked = masked.data<float>();
  float* sum_g = sums.data<float>();
  BackwardSumsLoop(s, pg, &relu_mask, pmasked, x.data<float>(), mean.data<float>(), sum_g, sum_g + s.c);
}

Tensor InputGrad(const Tensor& gy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                 const Tensor& weight, const Tensor& sums, int64_t count, bool training) {
  const BatchNormShape s = BatchNormShapeOf(x);
  Tensor gx = Tensor::Empty(x.shape(), DType::kFloat32, x.device());
  const float* pm = mean.data<float>();
  const float* ps = sums.data<float>();
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) {
    cuda::DeviceGuard guard(x.device().index);
    DDP_CUDA_CHECK(cuda::kernels::BatchNormInputGrad(gy.data<float>(), x.data<float>(), pm,
                                                     invstd.data<float>(), PointerOrNull(weight),
                                                     StrideOrZero(weight), ps, ps + s.c, s.n, s.c, s.inner,
                                                     count, training, gx.data<float>(), cuda::StreamOf(x)));
    return gx;
  }
#endif
  std::vector<float> k(s.c), a(s.c, 0.0f), b(s.c, 0.0f);
  for (int64_t ch = 0; ch < s.c; ++ch) {
    const double is = At(invstd, ch, 1.0f), kk = At(weight, ch, 1.0f) * is;
    k[ch] = static_cast<float>(kk);
    if (!training) continue;
    a[ch] = static_cast<float>(-kk * is * is * ps[s.c + ch] / static_cast<double>(count));
    b[ch] = static_cast<float>(-kk * ps[ch] / static_cast<double>(count));
  }
  const float* pg = gy.data<float>();
  const float* px = x.data<float>();
  float* out = gx.data<float>();
  ForEachRow(s, [&](int64_t ch, int64_t base) {
    const float kc = k[ch], ac = a[ch], bc = b[ch], mc = pm[ch];
    for (int64_t j = 0; j < s.inner; ++j) out[base + j] = kc * pg[base + j] + ac * (px[base + j] - mc) + bc;
  });
  return gx;
}

}  // namespace ddp
