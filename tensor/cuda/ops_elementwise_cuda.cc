// The CUDA side of copies and optimizer steps, and the helpers of op_util.h (contracts:
// tensor/ops.h, cuda_ops.h, op_util.h).
#include <cstring>

#include "tensor/cpu_elementwise.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/op_util.h"
#include "tensor/function_node.h"
#include "tensor/ops.h"

namespace ddp {
namespace cuda {

int RequireCudaFloat(const char* op, std::initializer_list<const Tensor*> inputs) {
  int device = -1;
  for (const Tensor* t : inputs) {
    if (t == nullptr || !t->defined()) continue;
    DDP_CHECK(t->device().is_cuda()) << op << ": input on " << t->device().ToString()
                                     << " mixed with CUDA inputs (move it with ToDevice)";
    if (device < 0) device = t->device().index;
    DDP_CHECK(t->device().index == device) << op << ": inputs on cuda:" << device << " and "
                                           << t->device().ToString();
    DDP_CHECK(t->dtype() == DType::kFloat32) << op << ": expects float32, got " << DTypeName(t->dtype());
  }
  return device;
}

kernels::Indexer MakeIndexer(const Shape& shape, const std::vector<int64_t>& s0, const std::vector<int64_t>& s1,
                             const std::vector<int64_t>& s2) {
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
  DDP_CUDA_CHECK(kernels::StridedCopy(out.raw_data(), x.raw_data(), static_cast<int>(ElementSize(x.dtype())), ix,
                                      StreamOf(x)));
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

// ---- copies between devices and dtypes ----

namespace {

// src converted to `dtype` on its own device, contiguous.
Tensor ConvertedContiguous(const Tensor& src, DType dtype) {
  if (src.device().is_cpu()) {
    Tensor c = src.is_contiguous() ? src.Detach() : ddp::Contiguous(src.Detach());
    return ToDType(c, dtype);
  }
  Tensor c = ContiguousNoGrad(src);
  if (c.dtype() == dtype) return c;
  Tensor out = Tensor::Empty(c.shape(), dtype, c.device());
  DeviceGuard guard(c.device().index);
  DDP_CUDA_CHECK(kernels::Convert(out.raw_data(), static_cast<kernels::ElementType>(dtype), c.raw_data(),
                                  static_cast<kernels::ElementType>(c.dtype()), c.numel(), StreamOf(c)));
  return out;
}

// Contiguous same-dtype, same-size copy between any two devices on the CUDA side's current stream;
// waits for the copy when the destination is host memory.
void CopyBytes(const Tensor& dst, const Tensor& src) {
  const Device cuda_side = dst.device().is_cuda() ? dst.device() : src.device();
  DeviceGuard guard(cuda_side.index);
  cudaStream_t stream = CurrentStream(cuda_side.index);
  DDP_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDefault, stream));
  if (dst.device().is_cpu()) DDP_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

void CopyInPlace(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  Tensor s = ConvertedContiguous(src, dst.dtype());
  if (dst.is_contiguous()) {
    CopyBytes(dst, s);
    return;
  }
  // Strided destination: bring the values to dst's device contiguously, then scatter there.
  Tensor staged = s;
  if (s.device() != dst.device()) {
    staged = Tensor::Empty(s.shape(), s.dtype(), dst.device());
    CopyBytes(staged, s);
  }
  Tensor shaped = Tensor::View(staged.storage(), dst.shape(), ContiguousStrides(dst.shape()),
                               staged.storage_offset(), staged.dtype());
  if (dst.device().is_cpu()) {
    ddp::CopyInPlace(dst, shaped);
    return;
  }
  DeviceGuard guard(dst.device().index);
  const kernels::Indexer ix = MakeIndexer(dst.shape(), dst.strides(), shaped.strides());
  DDP_CUDA_CHECK(kernels::StridedCopy(dst.raw_data(), shaped.raw_data(), static_cast<int>(ElementSize(dst.dtype())),
                                      ix, StreamOf(dst)));
}

void MoveToDeviceInPlace(const Tensor& t, Device device) {
  DDP_CHECK(!t.grad().defined()) << "MoveToDeviceInPlace: " << t.name() << " already has a gradient";
  if (t.device() == device) return;
  Tensor moved = Tensor::Empty(t.shape(), t.dtype(), device);
  cuda::CopyInPlace(moved, t.Detach());
  TensorImpl* impl = t.impl();
  impl->storage = moved.storage();
  impl->strides = moved.strides();
  impl->offset = 0;
}

// ---- optimizer steps ----

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
  DDP_CUDA_CHECK(kernels::AdamStep(step, param.data<float>(), m.data<float>(), v.data<float>(), grad.data<float>(),
                                   param.numel(), StreamOf(param)));
}

}  // namespace cuda
}  // namespace ddp
