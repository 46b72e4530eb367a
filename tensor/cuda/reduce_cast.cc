// The CUDA side of the Reducer's bfloat16 bucket slots (contracts: cuda_ops.h; Note [Reduce dtype
// rounding], reducer/bucket_cast.h).
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/op_util.h"

namespace ddp {
namespace cuda {

void CastScaledToBFloat16(const Tensor& dst, const Tensor& src, float scale) {
  DDP_CHECK(dst.device().is_cuda() && dst.dtype() == DType::kBFloat16 && dst.is_contiguous())
      << "CastScaledToBFloat16: the destination must be a contiguous bfloat16 CUDA tensor, got "
      << DTypeName(dst.dtype()) << " on " << dst.device().ToString();
  DDP_CHECK(src.device() == dst.device() && src.dtype() == DType::kFloat32 && src.numel() == dst.numel())
      << "CastScaledToBFloat16: the source must be float32 on " << dst.device().ToString() << " with "
      << dst.numel() << " elements, got " << DTypeName(src.dtype()) << " on " << src.device().ToString()
      << " with " << src.numel();
  const Tensor source = ContiguousNoGrad(src);
  DeviceGuard guard(dst.device().index);
  DDP_CUDA_CHECK(kernels::RoundScaledToBFloat16(source.data<float>(), scale, static_cast<uint16_t*>(dst.raw_data()),
                                                dst.numel(), StreamOf(dst)));
}

void ZeroBytes(const Tensor& dst) {
  DDP_CHECK(dst.device().is_cuda() && dst.is_contiguous())
      << "ZeroBytes: expects a contiguous CUDA tensor, got one on " << dst.device().ToString();
  if (dst.numel() == 0) return;
  DeviceGuard guard(dst.device().index);
  DDP_CUDA_CHECK(cudaMemsetAsync(dst.raw_data(), 0, dst.nbytes(), StreamOf(dst)));
}

}  // namespace cuda
}  // namespace ddp
