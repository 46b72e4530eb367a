// The optimizers' CUDA steps over the functors of tensor/functors.h (contracts: cuda_ops.h).
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/op_util.h"

namespace ddp {
namespace cuda {

void SgdStep(const Tensor& param, const Tensor& buf, const Tensor& grad, const functors::SgdStep& step) {
  RequireCudaFloat("SgdStep", {&param, &buf, &grad});
  DDP_CHECK(param.is_contiguous() && grad.is_contiguous() && (!buf.defined() || buf.is_contiguous()) &&
            grad.numel() == param.numel())
      << "SgdStep: parameter, gradient and momentum buffer must be contiguous and equal in size";
  DeviceGuard guard(param.device().index);
  DDP_CUDA_CHECK(kernels::SgdStep(step, param.data<float>(), buf.defined() ? buf.data<float>() : nullptr,
                                  grad.data<float>(), param.numel(), StreamOf(param)));
}

void AdamStep(const Tensor& param, const Tensor& m, const Tensor& v, const Tensor& grad,
              const functors::AdamStep& step) {
  RequireCudaFloat("AdamStep", {&param, &m, &v, &grad});
  DDP_CHECK(param.is_contiguous() && m.is_contiguous() && v.is_contiguous() && grad.is_contiguous() &&
            grad.numel() == param.numel())
      << "AdamStep: parameter, gradient and moments must be contiguous and equal in size";
  DeviceGuard guard(param.device().index);
  DDP_CUDA_CHECK(kernels::AdamStep(step, param.data<float>(), m.data<float>(), v.data<float>(),
                                   grad.data<float>(), param.numel(), StreamOf(param)));
}

}  // namespace cuda
}  // namespace ddp
