// Helpers for the CUDA side of the ops (tensor/ops_*.cc, where kernel calls branch on the device, and
// tensor/cuda/*.cc): input checks, indexers, stream lookup and the element-wise launchers on tensors.
#ifndef DDP_TENSOR_CUDA_OP_UTIL_H_
#define DDP_TENSOR_CUDA_OP_UTIL_H_

#include <initializer_list>
#include <vector>

#include "tensor/cuda/context.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/kernels.h"
#include "tensor/tensor.h"

namespace ddp {
namespace cuda {

// Aborts naming `op` unless every defined input is a float32 tensor on the CUDA device of the first.
// Returns that device's index.
int RequireCudaFloat(const char* op, std::initializer_list<const Tensor*> inputs);

// The current stream of t's device.
inline cudaStream_t StreamOf(const Tensor& t) { return CurrentStream(t.device().index); }

// An indexer over `shape` with operands' strides (each of shape.size() entries; missing operands 0).
kernels::Indexer MakeIndexer(const Shape& shape, const std::vector<int64_t>& s0,
                             const std::vector<int64_t>& s1, const std::vector<int64_t>& s2 = {});

// The indexer of out = f(a, b) broadcast to out's shape (out contiguous), with the tensor-scalar case as a
// contiguous loop.
kernels::Indexer BinaryMapIndexer(const Tensor& a, const Tensor& b, const Tensor& out);
// The indexer of dst = f(dst, src), src broadcast to dst's shape.
kernels::Indexer BinaryInPlaceIndexer(const Tensor& dst, const Tensor& src);

// The element-wise launchers on tensors of one GPU, for the functors kernels::Binary / kernels::Unary are
// instantiated for. Each runs on the current stream of its first tensor's device.

// out = f(a, b) with broadcasting to out_shape, in a new contiguous tensor.
template <typename F>
Tensor BinaryMap(const Tensor& a, const Tensor& b, const Shape& out_shape, const F& f) {
  Tensor out = Tensor::Empty(out_shape, DType::kFloat32, a.device());
  DeviceGuard guard(a.device().index);
  DDP_CUDA_CHECK(kernels::Binary(f, out.data<float>(), a.data<float>(), b.data<float>(),
                                 BinaryMapIndexer(a, b, out), StreamOf(a)));
  return out;
}

// dst = f(dst, src), src broadcast to dst's shape.
template <typename F>
void BinaryInPlace(const Tensor& dst, const Tensor& src, const F& f) {
  DeviceGuard guard(dst.device().index);
  DDP_CUDA_CHECK(kernels::Binary(f, dst.data<float>(), dst.data<float>(), src.data<float>(),
                                 BinaryInPlaceIndexer(dst, src), StreamOf(dst)));
}

// out = f(x) in a new contiguous tensor.
template <typename F>
Tensor UnaryMap(const Tensor& x, const F& f) {
  Tensor out = Tensor::Empty(x.shape(), DType::kFloat32, x.device());
  DeviceGuard guard(x.device().index);
  DDP_CUDA_CHECK(kernels::Unary(f, out.data<float>(), x.data<float>(),
                                MakeIndexer(x.shape(), out.strides(), x.strides()), StreamOf(x)));
  return out;
}

// dst = f(dst).
template <typename F>
void UnaryInPlace(const Tensor& dst, const F& f) {
  DeviceGuard guard(dst.device().index);
  DDP_CUDA_CHECK(kernels::Unary(f, dst.data<float>(), dst.data<float>(),
                                MakeIndexer(dst.shape(), dst.strides(), dst.strides()), StreamOf(dst)));
}

// A contiguous tensor with x's values (x itself when already contiguous), any dtype, no autograd.
Tensor ContiguousNoGrad(const Tensor& x);

}  // namespace cuda
}  // namespace ddp

#endif  // DDP_TENSOR_CUDA_OP_UTIL_H_
