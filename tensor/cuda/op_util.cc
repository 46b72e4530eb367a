// The CUDA ops' shared helpers: input checks, indexers and contiguous copies (contracts: op_util.h).
#include "tensor/cuda/op_util.h"

#include "tensor/cpu_elementwise.h"

namespace ddp {
namespace cuda {

int RequireCudaFloat(const char* op, std::initializer_list<const Tensor*> inputs) {
  int device = -1;
  for (const Tensor* t : inputs) {
    if (t == nullptr || !t->defined()) continue;
    DDP_CHECK(t->device().is_cuda()) << op << ": input on " << t->device().ToString()
                                     << " mixed with CUDA inputs (move it with ToDevice)";
    if (device < 0) device = t->device().index;
    DDP_CHECK(t->device().index == device)
        << op << ": inputs on cuda:" << device << " and " << t->device().ToString();
    DDP_CHECK(t->dtype() == DType::kFloat32) << op << ": expects float32, got " << DTypeName(t->dtype());
  }
  return device;
}

kernels::Indexer MakeIndexer(const Shape& shape, const std::vector<int64_t>& s0,
                             const std::vector<int64_t>& s1, const std::vector<int64_t>& s2) {
  kernels::Indexer ix;
  DDP_CHECK(shape.size() <= static_cast<size_t>(kernels::kMaxDims))
      << "CUDA element-wise ops support up to " << kernels::kMaxDims << " dims, got " << ShapeToString(shape);
  ix.numel = NumElements(shape);
  ix.ndim = static_cast<int>(shape.size());
  const std::vector<int64_t> contiguous = ContiguousStrides(shape);
  bool all_contiguous = true;
  const std::vector<int64_t>* strides[3] = {&s0, &s1, &s2};
  for (size_t d = 0; d < shape.size(); ++d) {
    ix.shape[d] = shape[d];
    for (int k = 0; k < 3; ++k) {
      const int64_t s = strides[k]->empty() ? 0 : (*strides[k])[d];
      ix.strides[k][d] = s;
      // An operand is "contiguous" when it matches the row-major strides (size-1 dims excepted) or is
      // an all-zero broadcast (scalar) operand.
      if (!strides[k]->empty() && shape[d] != 1 && s != contiguous[d]) all_contiguous = false;
    }
  }
  if (all_contiguous) {
    ix.contiguous = true;
    for (int k = 0; k < 3; ++k) ix.strides[k][0] = strides[k]->empty() ? 0 : 1;
  }
  return ix;
}

Tensor ContiguousNoGrad(const Tensor& x) {
  if (x.is_contiguous()) return x.Detach();
  Tensor out = Tensor::Empty(x.shape(), x.dtype(), x.device());
  DeviceGuard guard(x.device().index);
  const kernels::Indexer ix = MakeIndexer(x.shape(), out.strides(), x.strides());
  DDP_CUDA_CHECK(kernels::StridedCopy(out.raw_data(), x.raw_data(), static_cast<int>(ElementSize(x.dtype())),
                                      ix, StreamOf(x)));
  return out;
}

kernels::Indexer BinaryMapIndexer(const Tensor& a, const Tensor& b, const Tensor& out) {
  const Shape& out_shape = out.shape();
  kernels::Indexer ix = MakeIndexer(out_shape, out.strides(), cpu::BroadcastStrides(a, out_shape),
                                    cpu::BroadcastStrides(b, out_shape));
  if (b.numel() == 1 && a.shape() == out_shape && a.is_contiguous()) {  // tensor-scalar fast path
    ix.contiguous = true;
    ix.strides[0][0] = 1;
    ix.strides[1][0] = 1;
    ix.strides[2][0] = 0;
  }
  return ix;
}

kernels::Indexer BinaryInPlaceIndexer(const Tensor& dst, const Tensor& src) {
  return MakeIndexer(dst.shape(), dst.strides(), dst.strides(), cpu::BroadcastStrides(src, dst.shape()));
}

}  // namespace cuda
}  // namespace ddp
