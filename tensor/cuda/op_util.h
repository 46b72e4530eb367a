// Internal helpers of the CUDA ops (tensor/cuda/*.cc): input checks, indexers and stream lookup.
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
kernels::Indexer MakeIndexer(const Shape& shape, const std::vector<int64_t>& s0, const std::vector<int64_t>& s1,
                             const std::vector<int64_t>& s2 = {});

// out = op(a, b) with broadcasting to out_shape, in a new contiguous tensor.
Tensor BinaryMap(const Tensor& a, const Tensor& b, const Shape& out_shape, kernels::BinaryOp op, float param = 0.0f);
// dst = op(dst, src), src broadcast to dst's shape.
void BinaryInPlace(const Tensor& dst, const Tensor& src, kernels::BinaryOp op, float param = 0.0f);
// out = op(x) in a new contiguous tensor.
Tensor UnaryMap(const Tensor& x, kernels::UnaryOp op, float param = 0.0f);
// A contiguous tensor with x's values (x itself when already contiguous), any dtype, no autograd.
Tensor ContiguousNoGrad(const Tensor& x);

}  // namespace cuda
}  // namespace ddp

#endif  // DDP_TENSOR_CUDA_OP_UTIL_H_
