#include "reducer/bucket_cast.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "tensor/bf16_convert.h"
#include "tensor/ops.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_ops.h"
#endif

namespace ddp {

absl::Status CheckReduceDtype(DType dtype) {
  if (dtype == DType::kFloat32 || dtype == DType::kBFloat16) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("DDP reduce dtype ", DTypeName(dtype),
                                                  " is not supported: expected float32 or bfloat16"));
}

namespace {

// CastScaledIntoSlot's bfloat16 case on the CPU: the product is formed in float32 (step 1 of the Note) a
// block at a time, then rounded once.
void CastScaledToBFloat16OnCpu(const Tensor& slot, const Tensor& grad, float scale) {
  const Tensor source = grad.is_contiguous() ? grad : Contiguous(grad.Detach());
  const float* in = source.data<float>();
  BFloat16* out = slot.data<BFloat16>();
  const int64_t n = slot.numel();
  if (scale == 1.0f) {
    cpu::FloatToBFloat16Array(in, out, n);
    return;
  }
  constexpr int64_t kBlock = 2048;
  float scaled[kBlock];
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t count = std::min(kBlock, n - start);
    for (int64_t i = 0; i < count; ++i) scaled[i] = in[start + i] * scale;
    cpu::FloatToBFloat16Array(scaled, out + start, count);
  }
}

}  // namespace

void CastScaledIntoSlot(const Tensor& slot, const Tensor& grad, float scale) {
  if (slot.dtype() == DType::kFloat32) {
    CopyScaledInPlace(slot, grad, scale);
    return;
  }
  DDP_CHECK(slot.dtype() == DType::kBFloat16 && slot.is_contiguous())
      << "CastScaledIntoSlot: a bucket slot must be float32, or a contiguous bfloat16 region";
  DDP_CHECK(grad.dtype() == DType::kFloat32 && grad.numel() == slot.numel() && grad.device() == slot.device())
      << "CastScaledIntoSlot: the gradient must be float32 with the slot's " << slot.numel()
      << " elements, on the slot's device " << slot.device().ToString();
#ifdef DDP_WITH_CUDA
  if (slot.device().is_cuda()) {
    cuda::CastScaledToBFloat16(slot, grad, scale);  // the same functor's bits, on the current stream
    return;
  }
#endif
  CastScaledToBFloat16OnCpu(slot, grad, scale);
}

void ZeroSlot(const Tensor& slot) {
  if (slot.dtype() == DType::kFloat32) {
    FillInPlace(slot, 0.0f);
    return;
  }
  DDP_CHECK(slot.is_contiguous()) << "ZeroSlot: a 16-bit slot must be a contiguous region";
#ifdef DDP_WITH_CUDA
  if (slot.device().is_cuda()) {
    cuda::ZeroBytes(slot);
    return;
  }
#endif
  std::memset(slot.raw_data(), 0, slot.nbytes());  // +0.0 in bfloat16 is all zero bits
}

}  // namespace ddp
