#include "reducer/bucket_cast.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "tensor/bf16_convert.h"
#include "tensor/ops.h"

namespace ddp {

absl::Status CheckReduceDtype(DType dtype) {
  if (dtype == DType::kFloat32 || dtype == DType::kBFloat16) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("DDP reduce dtype ", DTypeName(dtype),
                                                  " is not supported: expected float32 or bfloat16"));
}

void CastScaledIntoSlot(const Tensor& slot, const Tensor& grad, float scale) {
  if (slot.dtype() == DType::kFloat32) {
    CopyScaledInPlace(slot, grad, scale);
    return;
  }
  DDP_CHECK(slot.dtype() == DType::kBFloat16 && slot.is_contiguous() && slot.device().is_cpu())
      << "CastScaledIntoSlot: a bucket slot must be float32, or a contiguous bfloat16 CPU region";
  DDP_CHECK(grad.dtype() == DType::kFloat32 && grad.numel() == slot.numel())
      << "CastScaledIntoSlot: the gradient must be float32 with the slot's " << slot.numel() << " elements";
  const Tensor source = grad.is_contiguous() ? grad : Contiguous(grad.Detach());
  const float* in = source.data<float>();
  BFloat16* out = slot.data<BFloat16>();
  const int64_t n = slot.numel();
  if (scale == 1.0f) {
    cpu::FloatToBFloat16Array(in, out, n);
    return;
  }
  // The product is formed in float32 (step 1 of the Note) a block at a time, then rounded once.
  constexpr int64_t kBlock = 2048;
  float scaled[kBlock];
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t count = std::min(kBlock, n - start);
    for (int64_t i = 0; i < count; ++i) scaled[i] = in[start + i] * scale;
    cpu::FloatToBFloat16Array(scaled, out + start, count);
  }
}

void ZeroSlot(const Tensor& slot) {
  if (slot.dtype() == DType::kFloat32) {
    FillInPlace(slot, 0.0f);
    return;
  }
  DDP_CHECK(slot.is_contiguous() && slot.device().is_cpu()) << "ZeroSlot: a 16-bit slot must be a contiguous CPU region";
  std::memset(slot.raw_data(), 0, slot.nbytes());  // +0.0 in bfloat16 is all zero bits
}

}  // namespace ddp
