// In-place ops (never recorded by autograd), dtype conversion and device copies. The element-wise in-place
// ops exist once for both devices: their checks here, their math a functor of tensor/functors.h run by
// tensor/elementwise_kernels.h. Copies between devices are the CUDA backend's (tensor/cuda/cuda_ops.h).
#include <cstring>

#include "tensor/autograd.h"
#include "tensor/bf16_convert.h"
#include "tensor/cpu_elementwise.h"
#include "tensor/elementwise_kernels.h"
#include "tensor/function_node.h"
#include "tensor/functors.h"
#include "tensor/half_convert.h"
#include "tensor/op_device.h"
#include "tensor/ops.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/op_util.h"
#endif

namespace ddp {
namespace {

// Aborts naming `op` unless src broadcasts to dst's shape.
void RequireBroadcastsTo(const char* op, const Tensor& dst, const Tensor& src) {
  DDP_CHECK(BroadcastShapes(dst.shape(), src.shape()) == dst.shape())
      << op << ": " << ShapeToString(src.shape()) << " does not broadcast to " << ShapeToString(dst.shape());
}

// Zeroes every byte of contiguous `dst` (any dtype), on dst's device.
void ZeroContiguous(const Tensor& dst) {
#ifdef DDP_WITH_CUDA
  if (dst.device().is_cuda()) {
    cuda::DeviceGuard guard(dst.device().index);
    DDP_CUDA_CHECK(cudaMemsetAsync(dst.raw_data(), 0, dst.nbytes(), cuda::StreamOf(dst)));
    return;
  }
#endif
  std::memset(dst.raw_data(), 0, dst.nbytes());
}

// dst = value everywhere for contiguous int64 `dst`, on dst's device.
void FillInt64(const Tensor& dst, int64_t value) {
  int64_t* p = dst.data<int64_t>();
#ifdef DDP_WITH_CUDA
  if (dst.device().is_cuda()) {
    cuda::DeviceGuard guard(dst.device().index);
    DDP_CUDA_CHECK(cuda::kernels::FillInt64(p, value, dst.numel(), cuda::StreamOf(dst)));
    return;
  }
#endif
  const int64_t n = dst.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

}  // namespace

const Tensor& AddInPlace(const Tensor& dst, const Tensor& src, float alpha) {
  RequireFloatOnOneDevice("AddInPlace", {&dst, &src});
  RequireBroadcastsTo("AddInPlace", dst, src);
  dst.storage()->BumpVersion();
  if (alpha == 1.0f) {
    MapBinaryInPlace(dst, src, functors::Add());
  } else {
    MapBinaryInPlace(dst, src, functors::Axpy{alpha});
  }
  return dst;
}

const Tensor& MulScalarInPlace(const Tensor& dst, float s) {
  RequireFloatOnOneDevice("MulScalarInPlace", {&dst});
  dst.storage()->BumpVersion();
  MapUnaryInPlace(dst, functors::MulScalar{s});
  return dst;
}

const Tensor& CopyScaledInPlace(const Tensor& dst, const Tensor& src, float scale) {
  RequireFloatOnOneDevice("CopyScaledInPlace", {&dst, &src});
  RequireBroadcastsTo("CopyScaledInPlace", dst, src);
  dst.storage()->BumpVersion();
  MapBinaryInPlace(dst, src, functors::ScaledCopy{scale});
  return dst;
}

const Tensor& FillInPlace(const Tensor& dst, float value) {
  dst.storage()->BumpVersion();
  if (dst.dtype() == DType::kInt64) {
    DDP_CHECK(dst.is_contiguous()) << "FillInPlace on a strided int64 tensor";
    FillInt64(dst, static_cast<int64_t>(value));
    return dst;
  }
  RequireFloatOnOneDevice("FillInPlace", {&dst});
  if (dst.is_contiguous() && value == 0.0f) {
    ZeroContiguous(dst);
  } else {
    MapUnaryInPlace(dst, functors::Fill{value});
  }
  return dst;
}

namespace {

// Converts n contiguous elements from one dtype to another on the CPU.
void ConvertElements(const void* src, DType from, void* dst, DType to, int64_t n) {
  auto load = [&](int64_t i) -> float {
    switch (from) {
      case DType::kFloat32:
        return static_cast<const float*>(src)[i];
      case DType::kInt64:
        return static_cast<float>(static_cast<const int64_t*>(src)[i]);
      case DType::kFloat16:
        return HalfToFloat(static_cast<const uint16_t*>(src)[i]);
      case DType::kBFloat16:
        return BFloat16ToFloat(static_cast<const uint16_t*>(src)[i]);
    }
    return 0.0f;
  };
  if (from == to) {
    std::memcpy(dst, src, n * ElementSize(from));
    return;
  }
  // The conversions DDP runs on every step (bf16 bucket slots widened into .grad, the fp16/bf16 comm hooks'
  // compression) take the vectorised kernels, which give the functors' bits element for element. On the
  // calling thread only: a copy may run on a communication thread, where an OpenMP region would start a
  // team of its own beside the ranks' compute.
  if (from == DType::kBFloat16 && to == DType::kFloat32) {
    cpu::BFloat16ToFloatRun(static_cast<const BFloat16*>(src), static_cast<float*>(dst), n);
    return;
  }
  if (from == DType::kFloat32 && to == DType::kBFloat16) {
    cpu::FloatToBFloat16Run(static_cast<const float*>(src), static_cast<BFloat16*>(dst), n);
    return;
  }
  if (from == DType::kFloat16 && to == DType::kFloat32) {
    cpu::HalfToFloatRun(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
    return;
  }
  if (from == DType::kFloat32 && to == DType::kFloat16) {
    cpu::FloatToHalfRun(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
    return;
  }
  if (from == DType::kInt64 && to == DType::kFloat32) {
    for (int64_t i = 0; i < n; ++i) static_cast<float*>(dst)[i] = load(i);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = load(i);
    switch (to) {
      case DType::kFloat32:
        static_cast<float*>(dst)[i] = v;
        break;
      case DType::kInt64:
        static_cast<int64_t*>(dst)[i] = static_cast<int64_t>(v);
        break;
      case DType::kFloat16:
        static_cast<uint16_t*>(dst)[i] = FloatToHalf(v);
        break;
      case DType::kBFloat16:
        static_cast<uint16_t*>(dst)[i] = FloatToBFloat16(v);
        break;
    }
  }
}

// Gathers a strided tensor into a new contiguous one of the same dtype (any element size).
Tensor GatherContiguous(const Tensor& src) {
  Tensor out = Tensor::Empty(src.shape(), src.dtype(), src.device());
  const size_t size = ElementSize(src.dtype());
  const char* in = static_cast<const char*>(src.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  cpu::ForEachIndex(src.shape(), src.strides(), src.strides(),
                    [&](int64_t i, int64_t si, int64_t) { std::memcpy(o + i * size, in + si * size, size); });
  return out;
}

}  // namespace

const Tensor& CopyInPlace(const Tensor& dst, const Tensor& src) {
  DDP_CHECK(dst.numel() == src.numel())
      << "CopyInPlace: " << ShapeToString(src.shape()) << " into " << ShapeToString(dst.shape());
  dst.storage()->BumpVersion();
#ifdef DDP_WITH_CUDA
  if (dst.device().is_cuda() || src.device().is_cuda()) {
    cuda::CopyInPlace(dst, src);
    return dst;
  }
#endif
  DDP_CHECK(dst.device().is_cpu() && src.device().is_cpu()) << "CopyInPlace: no CUDA copy in this build";
  Tensor s = src.is_contiguous() ? src : GatherContiguous(src);
  if (dst.is_contiguous()) {
    ConvertElements(s.raw_data(), s.dtype(), dst.raw_data(), dst.dtype(), dst.numel());
    return dst;
  }
  DDP_CHECK(dst.dtype() == DType::kFloat32) << "CopyInPlace into a strided non-float32 tensor";
  Tensor converted = ToDType(s, DType::kFloat32);
  Tensor shaped = Tensor::View(converted.storage(), dst.shape(), ContiguousStrides(dst.shape()),
                               converted.storage_offset(), DType::kFloat32);
  cpu::BinaryInPlace(dst, shaped, functors::Assign());
  return dst;
}

Tensor ToDType(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = Tensor::Empty(x.shape(), dtype, x.device());
  CopyInPlace(out, x);
  return out;
}

Tensor HostContiguous(const Tensor& x) {
  NoGradGuard no_grad;
  Tensor host = x.device().is_cpu() ? x.Detach() : ToDevice(x.Detach(), Device::CPU());
  if (host.is_contiguous()) return host;
  Tensor packed = Tensor::Empty(host.shape(), host.dtype());
  CopyInPlace(packed, host);
  return packed;
}

Tensor ToDevice(const Tensor& x, Device device) {
  if (x.device() == device) return x;
#ifndef DDP_WITH_CUDA
  DDP_CHECK(false) << "copy from " << x.device().ToString() << " to " << device.ToString()
                   << ": this build has no CUDA support (build with --config=cuda)";
#endif
  Tensor out = Tensor::Empty(x.shape(), x.dtype(), device);
  CopyInPlace(out, x.Detach());
  const Device from = x.device();
  return RecordOp(out, "ToDeviceBackward", {&x},
                  [from](const Tensor& g) { return std::vector<Tensor>{ToDevice(g, from)}; });
}

}  // namespace ddp
