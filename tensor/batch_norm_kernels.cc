// BatchNorm's per-channel kernels (contracts: tensor/batch_norm_kernels.h). Each runs its CUDA kernel
// when the input is on a GPU and the CPU loop below otherwise; the CPU loops use OpenMP above 64 Ki
// elements.
#include "tensor/batch_norm_kernels.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "base/check.h"
#include "tensor/batch_norm_channels_last.h"
#include "tensor/batch_norm_rows.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/op_util.h"
#endif

namespace ddp {
namespace {

constexpr int64_t kParallelElements = int64_t{1} << 16;

// Runs f(ch, offset) for every row x[i, ch, :] of `s` (offset of its first element), rows in parallel.
template <typename F>
void ForEachRow(const BatchNormShape& s, F f) {
#pragma omp parallel for collapse(2) if (s.n * s.c * s.inner > kParallelElements)
  for (int64_t i = 0; i < s.n; ++i) {
    for (int64_t ch = 0; ch < s.c; ++ch) f(ch, (i * s.c + ch) * s.inner);
  }
}

// Each channel's affine map y = x * a + b (Note [BatchNorm pieces]).
std::vector<batch_norm_rows::AffineCoefficients> AffineOf(int64_t c, const Tensor& mean, const Tensor& invstd,
                                                          const Tensor& weight, const Tensor& bias) {
  std::vector<batch_norm_rows::AffineCoefficients> affine(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    affine[ch] = batch_norm_rows::AffineOf(ChannelValueOr(mean, ch, 0.0f), ChannelValueOr(invstd, ch, 1.0f),
                                           ChannelValueOr(weight, ch, 1.0f), ChannelValueOr(bias, ch, 0.0f));
  }
  return affine;
}

#ifdef DDP_WITH_CUDA
float* PointerOrNull(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
int64_t StrideOrZero(const Tensor& t) { return t.defined() ? t.strides()[0] : 0; }
#endif

}  // namespace

float ChannelValueOr(const Tensor& t, int64_t ch, float fallback) {
  return t.defined() ? t.data<float>()[ch * t.strides()[0]] : fallback;
}

uint8_t* SizeReluMask(ReluMaskBits* mask, const BatchNormShape& s) {
  if (mask == nullptr) return nullptr;
  mask->row_bytes = (s.inner + 7) / 8;
  mask->bits.resize(static_cast<size_t>(s.n * s.c * mask->row_bytes));
  return mask->bits.data();
}

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
    double total = 0.0;
    for (int64_t i = 0; i < s.n; ++i) {
      const float* row = px + (i * s.c + ch) * s.inner;
      total = pm == nullptr ? batch_norm_rows::AddRowSum(total, row, s.inner)
                            : batch_norm_rows::AddRowSquaredDeviations(total, row, s.inner, pm[ch]);
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
    out.data<float>()[ch] = batch_norm_rows::InverseStdOf(ChannelValueOr(var, ch, 1.0f), eps);
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
      r = static_cast<float>((1.0 - momentum) * r + momentum * ChannelValueOr(mean, ch, 0.0f));
    }
    if (running_var.defined()) {
      float& r = running_var.data<float>()[ch * running_var.strides()[0]];
      r = static_cast<float>((1.0 - momentum) * r + momentum * ChannelValueOr(var, ch, 0.0f) * unbias);
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
  const auto affine = AffineOf(s.c, mean, invstd, weight, bias);
  if (s.inner == 1) {  // Note [BatchNorm over channels in lanes]
    batch_norm_channels_last::Normalize(s.n, s.c, affine.data(), /*relu=*/false,
                                        {px, nullptr, nullptr, nullptr, nullptr, py, nullptr, nullptr});
    return y;
  }
  ForEachRow(s, [&](int64_t ch, int64_t base) {
    batch_norm_rows::NormalizeRow(px + base, s.inner, affine[ch], py + base);
  });
  return y;
}

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
  uint8_t* pmask = SizeReluMask(relu_mask, s);
  const int64_t row_bytes = (s.inner + 7) / 8;
  const auto affine = AffineOf(s.c, mean, invstd, weight, bias);
  if (s.inner == 1) {  // Note [BatchNorm over channels in lanes]
    batch_norm_channels_last::Normalize(s.n, s.c, affine.data(), /*relu=*/true,
                                        {px, pr, nullptr, nullptr, nullptr, py, pb, pmask});
    return y;
  }
  ForEachRow(s, [&](int64_t ch, int64_t base) {
    batch_norm_rows::NormalizeAddReluRow(px + base, pr != nullptr ? pr + base : nullptr, s.inner, affine[ch],
                                         py + base, pb != nullptr ? pb + base : nullptr,
                                         pmask != nullptr ? pmask + base / s.inner * row_bytes : nullptr);
  });
  return y;
}

namespace {

// sums = {Σ g, Σ g * (x - mean)} per channel over the output gradient g: gy itself when `mask` is null,
// else ReluMask(gy, the mask's lane), which is also written to `masked`
// (batch_norm_rows::AddRowBackwardSums).
void BackwardSumsLoop(const BatchNormShape& s, const float* pg, const ReluMaskBits* mask, float* pmasked,
                      const float* px, const float* pm, float* sum_g, float* sum_gx) {
#pragma omp parallel for if (s.n * s.c * s.inner > kParallelElements)
  for (int64_t ch = 0; ch < s.c; ++ch) {
    batch_norm_rows::BackwardTotals totals;
    thread_local std::vector<uint32_t> positive;  // this row's mask as lanes, reused across calls
    if (mask != nullptr) positive.resize(static_cast<size_t>(8 * mask->row_bytes));
    for (int64_t i = 0; i < s.n; ++i) {
      const int64_t base = (i * s.c + ch) * s.inner;
      if (mask != nullptr) {
        batch_norm_rows::ExpandRowMask(mask->bits.data() + (i * s.c + ch) * mask->row_bytes, mask->row_bytes,
                                       positive.data());
      }
      batch_norm_rows::AddRowBackwardSums(pg + base, mask != nullptr ? positive.data() : nullptr,
                                          mask != nullptr ? pmasked + base : nullptr, px + base, s.inner,
                                          pm[ch], totals);
    }
    sum_g[ch] = static_cast<float>(totals.g);
    sum_gx[ch] = static_cast<float>(totals.gx);
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
  std::vector<batch_norm_rows::InputGradCoefficients> coefficients(s.c);
  for (int64_t ch = 0; ch < s.c; ++ch) {
    coefficients[ch] = batch_norm_rows::InputGradOf(
        ChannelValueOr(invstd, ch, 1.0f), ChannelValueOr(weight, ch, 1.0f), training ? ps[ch] : 0.0f,
        training ? ps[s.c + ch] : 0.0f, count, training);
  }
  const float* pg = gy.data<float>();
  const float* px = x.data<float>();
  float* out = gx.data<float>();
  ForEachRow(s, [&](int64_t ch, int64_t base) {
    batch_norm_rows::InputGradRow(pg + base, px + base, s.inner, coefficients[ch], pm[ch], out + base);
  });
  return gx;
}

}  // namespace ddp
