// In-place ops (never recorded by autograd), dtype conversion and device copies.
#include <cstring>

#include "tensor/autograd.h"
#include "tensor/cpu_elementwise.h"
#include "tensor/device_guard.h"
#include "tensor/functors.h"
#include "tensor/ops.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_ops.h"
#endif

namespace ddp {

const Tensor& AddInPlace(const Tensor& dst, const Tensor& src, float alpha) {
#ifdef DDP_WITH_CUDA
  if (dst.device().is_cuda() || src.device().is_cuda()) {
    cuda::AddInPlace(dst, src, alpha);
    return dst;
  }
#endif
  RequireCpuFloat("AddInPlace", {&dst, &src});
  BroadcastShapes(dst.shape(), src.shape());
  DDP_CHECK(BroadcastShapes(dst.shape(), src.shape()) == dst.shape())
      << "AddInPlace: " << ShapeToString(src.shape()) << " does not broadcast to "
      << ShapeToString(dst.shape());
  if (alpha == 1.0f) {
    cpu::BinaryInPlace(dst, src, functors::Add());
  } else {
    cpu::BinaryInPlace(dst, src, functors::Axpy{alpha});
  }
  return dst;
}

const Tensor& MulScalarInPlace(const Tensor& dst, float s) {
#ifdef DDP_WITH_CUDA
  if (dst.device().is_cuda()) {
    cuda::MulScalarInPlace(dst, s);
    return dst;
  }
#endif
  RequireCpuFloat("MulScalarInPlace", {&dst});
  cpu::BinaryInPlace(dst, dst, [s](float a, float) { return a * s; });
  return dst;
}

const Tensor& CopyScaledInPlace(const Tensor& dst, const Tensor& src, float scale) {
#ifdef DDP_WITH_CUDA
  if (dst.device().is_cuda() || src.device().is_cuda()) {
    cuda::CopyScaledInPlace(dst, src, scale);
    return dst;
  }
#endif
  RequireCpuFloat("CopyScaledInPlace", {&dst, &src});
  DDP_CHECK(BroadcastShapes(dst.shape(), src.shape()) == dst.shape())
      << "CopyScaledInPlace: " << ShapeToString(src.shape()) << " does not broadcast to " << ShapeToString(dst.shape());
  cpu::BinaryInPlace(dst, src, functors::ScaledCopy{scale});
  return dst;
}

const Tensor& FillInPlace(const Tensor& dst, float value) {
#ifdef DDP_WITH_CUDA
  if (dst.device().is_cuda()) {
    cuda::FillInPlace(dst, value);
    return dst;
  }
#endif
  DDP_CHECK(dst.device().is_cpu()) << "FillInPlace: no CUDA kernel in this build";
  if (dst.dtype() == DType::kInt64) {
    int64_t* p = dst.data<int64_t>();
    DDP_CHECK(dst.is_contiguous()) << "FillInPlace on a strided int64 tensor";
    for (int64_t i = 0; i < dst.numel(); ++i) p[i] = static_cast<int64_t>(value);
    return dst;
  }
  RequireCpuFloat("FillInPlace", {&dst});
  if (dst.is_contiguous()) {
    float* p = dst.data<float>();
    const int64_t n = dst.numel();
    if (value == 0.0f) {
      std::memset(p, 0, n * sizeof(float));
    } else {
      for (int64_t i = 0; i < n; ++i) p[i] = value;
    }
  } else {
    cpu::BinaryInPlace(dst, dst, [value](float, float) { return value; });
  }
  return dst;
}

namespace {

// Converts n contiguous elements from one dtype to another on the CPU.
void ConvertElements(const void* src, DType from, void* dst, DType to, int64_t n) {
  auto load = [&](int64_t i) -> float {
    switch (from) {
      case DType::kFloat32: return static_cast<const float*>(src)[i];
      case DType::kInt64: return static_cast<float>(static_cast<const int64_t*>(src)[i]);
      case DType::kFloat16: return HalfToFloat(static_cast<const uint16_t*>(src)[i]);
      case DType::kBFloat16: return BFloat16ToFloat(static_cast<const uint16_t*>(src)[i]);
    }
    return 0.0f;
  };
  if (from == to) {
    std::memcpy(dst, src, n * ElementSize(from));
    return;
  }
  if (from == DType::kInt64 && to == DType::kFloat32) {
    for (int64_t i = 0; i < n; ++i) static_cast<float*>(dst)[i] = load(i);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = load(i);
    switch (to) {
      case DType::kFloat32: static_cast<float*>(dst)[i] = v; break;
      case DType::kInt64: static_cast<int64_t*>(dst)[i] = static_cast<int64_t>(v); break;
      case DType::kFloat16: static_cast<uint16_t*>(dst)[i] = FloatToHalf(v); break;
      case DType::kBFloat16: static_cast<uint16_t*>(dst)[i] = FloatToBFloat16(v); break;
    }
  }
}

}  // namespace

namespace {

// Gathers a strided tensor into a new contiguous one of the same dtype (any element size).
Tensor GatherContiguous(const Tensor& src) {
  Tensor out = Tensor::Empty(src.shape(), src.dtype(), src.device());
  const size_t size = ElementSize(src.dtype());
  const char* in = static_cast<const char*>(src.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  cpu::ForEachIndex(src.shape(), src.strides(), src.strides(), [&](int64_t i, int64_t si, int64_t) {
    std::memcpy(o + i * size, in + si * size, size);
  });
  return out;
}

}  // namespace

const Tensor& CopyInPlace(const Tensor& dst, const Tensor& src) {
#ifdef DDP_WITH_CUDA
  if (dst.device().is_cuda() || src.device().is_cuda()) {
    cuda::CopyInPlace(dst, src);
    return dst;
  }
#endif
  DDP_CHECK(dst.numel() == src.numel()) << "CopyInPlace: " << ShapeToString(src.shape()) << " into "
                                        << ShapeToString(dst.shape());
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
  cpu::BinaryInPlace(dst, shaped, [](float, float b) { return b; });
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
#ifdef DDP_WITH_CUDA
  return cuda::ToDevice(x, device);
#else
  DDP_CHECK(false) << "copy from " << x.device().ToString() << " to " << device.ToString()
                   << ": this build has no CUDA support (build with --config=cuda)";
  return Tensor();
#endif
}

}  // namespace ddp
