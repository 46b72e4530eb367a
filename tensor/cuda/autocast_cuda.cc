// The CUDA side of autocast's casts (contracts: cuda_ops.h; Note [Autocast on CUDA], tensor/autocast.h).
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/op_util.h"

namespace ddp {
namespace cuda {

static_assert(static_cast<int>(DType::kFloat16) == static_cast<int>(kernels::ElementType::kFloat16) &&
                  static_cast<int>(DType::kBFloat16) == static_cast<int>(kernels::ElementType::kBFloat16),
              "kernels::ElementType mirrors DType");

Tensor RoundToLowPrecision(const Tensor& x, DType dtype) {
  DDP_CHECK(dtype == DType::kBFloat16 || dtype == DType::kFloat16)
      << "RoundToLowPrecision: dtype must be bfloat16 or float16, got " << DTypeName(dtype);
  DDP_CHECK(x.device().is_cuda() && x.dtype() == DType::kFloat32)
      << "RoundToLowPrecision: expects a float32 CUDA tensor, got " << DTypeName(x.dtype()) << " on "
      << x.device().ToString();
  const Tensor source = ContiguousNoGrad(x);
  Tensor out = Tensor::Empty(x.shape(), dtype, x.device());
  DeviceGuard guard(x.device().index);
  DDP_CUDA_CHECK(kernels::RoundToLowPrecision(source.data<float>(), static_cast<uint16_t*>(out.raw_data()),
                                              static_cast<kernels::ElementType>(dtype), x.numel(), StreamOf(x)));
  return out;
}

Tensor WidenToFloat32(const Tensor& x) {
  DDP_CHECK(x.device().is_cuda() && (x.dtype() == DType::kBFloat16 || x.dtype() == DType::kFloat16))
      << "WidenToFloat32: expects a bfloat16 or float16 CUDA tensor, got " << DTypeName(x.dtype()) << " on "
      << x.device().ToString();
  const Tensor source = ContiguousNoGrad(x);
  Tensor out = Tensor::Empty(x.shape(), DType::kFloat32, x.device());
  DeviceGuard guard(x.device().index);
  DDP_CUDA_CHECK(kernels::WidenLowPrecision(static_cast<const uint16_t*>(source.raw_data()),
                                            static_cast<kernels::ElementType>(x.dtype()), out.data<float>(),
                                            x.numel(), StreamOf(x)));
  return out;
}

}  // namespace cuda
}  // namespace ddp
