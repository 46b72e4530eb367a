// Element-wise kernel calls for op bodies written once for both devices (tensor/ops_elementwise.cc,
// ops_inplace.cc, ops_reduce.cc, ops_dropout.cc): the op passes a functor of tensor/functors.h, and the call
// runs it in the CPU loops of tensor/cpu_elementwise.h or, for CUDA tensors, in the CUDA launchers
// instantiated for it (tensor/cuda/kernels.h lists them; another functor does not link under
// --config=cuda). Callers have checked that the float32 operands share one device (tensor/op_device.h);
// nothing here records autograd. Thread-safe on distinct outputs.
#ifndef DDP_TENSOR_ELEMENTWISE_KERNELS_H_
#define DDP_TENSOR_ELEMENTWISE_KERNELS_H_

#include "tensor/cpu_elementwise.h"
#include "tensor/tensor.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/op_util.h"
#endif

namespace ddp {

// out = f(x) in a new contiguous tensor on x's device.
template <typename F>
Tensor MapUnary(const Tensor& x, const F& f) {
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) return cuda::UnaryMap(x, f);
#endif
  return cpu::UnaryMap(x, f);
}

// out = f(a, b) with a and b broadcast to `out_shape`, in a new contiguous tensor on a's device.
template <typename F>
Tensor MapBinary(const Tensor& a, const Tensor& b, const Shape& out_shape, const F& f) {
#ifdef DDP_WITH_CUDA
  if (a.device().is_cuda()) return cuda::BinaryMap(a, b, out_shape, f);
#endif
  return cpu::BinaryMap(a, b, out_shape, f);
}

// dst = f(dst) in place. REQUIRES: dst's elements do not overlap.
template <typename F>
void MapUnaryInPlace(const Tensor& dst, const F& f) {
#ifdef DDP_WITH_CUDA
  if (dst.device().is_cuda()) return cuda::UnaryInPlace(dst, f);
#endif
  cpu::UnaryInPlace(dst, f);
}

// dst = f(dst, src) in place, src broadcast to dst's shape. REQUIRES: BroadcastShapes(dst, src) is dst's
// shape, and dst's elements do not overlap.
template <typename F>
void MapBinaryInPlace(const Tensor& dst, const Tensor& src, const F& f) {
#ifdef DDP_WITH_CUDA
  if (dst.device().is_cuda()) return cuda::BinaryInPlace(dst, src, f);
#endif
  cpu::BinaryInPlace(dst, src, f);
}

}  // namespace ddp

#endif  // DDP_TENSOR_ELEMENTWISE_KERNELS_H_
