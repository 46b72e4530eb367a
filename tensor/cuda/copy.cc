// Copies between devices and dtypes with at least one side on a GPU (contracts: cuda_ops.h).
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/op_util.h"
#include "tensor/ops.h"

namespace ddp {
namespace cuda {

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
  DDP_CUDA_CHECK(kernels::StridedCopy(dst.raw_data(), shaped.raw_data(),
                                      static_cast<int>(ElementSize(dst.dtype())), ix, StreamOf(dst)));
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

}  // namespace cuda
}  // namespace ddp
