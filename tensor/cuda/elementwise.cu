// Element-wise kernels: one strided/broadcast loop shared by every binary and unary op, with the math
// from tensor/functors.h (the same functors the CPU loops in tensor/cpu_elementwise.h run).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "tensor/cuda/kernels.h"
#include "tensor/cuda/launch.cuh"

namespace ddp {
namespace cuda {
namespace kernels {
namespace {

// Offset of element i of the loop for operand k.
__device__ __forceinline__ int64_t Offset(const Indexer& ix, int k, int64_t i) {
  if (ix.contiguous) return ix.strides[k][0] == 0 ? 0 : i;
  int64_t offset = 0;
  for (int d = ix.ndim - 1; d >= 0; --d) {
    const int64_t size = ix.shape[d];
    const int64_t index = i % size;
    i /= size;
    offset += index * ix.strides[k][d];
  }
  return offset;
}

template <typename F>
__global__ void BinaryKernel(F f, float* out, const float* a, const float* b, Indexer ix) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < ix.numel;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t o = Offset(ix, 0, i);
    out[o] = f(a[Offset(ix, 1, i)], b[Offset(ix, 2, i)]);
  }
}

template <typename F>
__global__ void UnaryKernel(F f, float* out, const float* a, Indexer ix) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < ix.numel;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    out[Offset(ix, 0, i)] = f(a[Offset(ix, 1, i)]);
  }
}

// The contiguous, same-shape case: float4 loads when every pointer is 16-byte aligned.
template <typename F>
__global__ void BinaryContiguousKernel(F f, float* out, const float* a, const float* b, int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t n4 = n / 4;
  const float4* a4 = reinterpret_cast<const float4*>(a);
  const float4* b4 = reinterpret_cast<const float4*>(b);
  float4* o4 = reinterpret_cast<float4*>(out);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4; i += stride) {
    const float4 x = a4[i], y = b4[i];
    o4[i] = make_float4(f(x.x, y.x), f(x.y, y.y), f(x.z, y.z), f(x.w, y.w));
  }
  for (int64_t i = n4 * 4 + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    out[i] = f(a[i], b[i]);
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename T>
__global__ void StridedCopyKernel(T* out, const T* in, Indexer ix) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < ix.numel;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    out[Offset(ix, 0, i)] = in[Offset(ix, 1, i)];
  }
}

__device__ float LoadAsFloat(const void* p, ElementType t, int64_t i) {
  switch (t) {
    case ElementType::kFloat32: return static_cast<const float*>(p)[i];
    case ElementType::kInt64: return static_cast<float>(static_cast<const int64_t*>(p)[i]);
    case ElementType::kFloat16: return __half2float(static_cast<const __half*>(p)[i]);
    case ElementType::kBFloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  }
  return 0.0f;
}

__global__ void ConvertKernel(void* out, ElementType to, const void* in, ElementType from, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    if (from == ElementType::kInt64 && to == ElementType::kInt64) {
      static_cast<int64_t*>(out)[i] = static_cast<const int64_t*>(in)[i];
      continue;
    }
    const float v = LoadAsFloat(in, from, i);
    switch (to) {
      case ElementType::kFloat32: static_cast<float*>(out)[i] = v; break;
      case ElementType::kInt64: static_cast<int64_t*>(out)[i] = static_cast<int64_t>(v); break;
      case ElementType::kFloat16: static_cast<__half*>(out)[i] = __float2half_rn(v); break;
      case ElementType::kBFloat16: static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v); break;
    }
  }
}

__global__ void FillInt64Kernel(int64_t* out, int64_t value, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    out[i] = value;
  }
}

// SplitMix64: a counter-based generator, so element i's draw does not depend on thread scheduling.
__device__ __forceinline__ uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void DropoutMaskKernel(float* mask, int64_t n, float p, float scale, uint64_t seed) {
  constexpr float kUnit = 1.0f / 16777216.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const uint64_t bits = SplitMix64(seed ^ (static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ull));
    mask[i] = static_cast<float>(bits >> 40) * kUnit >= p ? scale : 0.0f;
  }
}

__global__ void SgdKernel(functors::SgdStep step, float* param, float* buf, const float* grad, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    float unused = 0.0f;
    step(param[i], buf != nullptr ? buf[i] : unused, grad[i]);
  }
}

__global__ void AdamKernel(functors::AdamStep step, float* param, float* m, float* v, const float* grad,
                           int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    step(param[i], m[i], v[i], grad[i]);
  }
}

}  // namespace

template <typename F>
cudaError_t Binary(const F& f, float* out, const float* a, const float* b, const Indexer& ix,
                   cudaStream_t s) {
  if (ix.numel == 0) return cudaSuccess;
  if (ix.contiguous && ix.strides[1][0] != 0 && ix.strides[2][0] != 0 && Aligned16(out) && Aligned16(a) &&
      Aligned16(b)) {
    BinaryContiguousKernel<<<Blocks(ix.numel / 4 + 1), kThreads, 0, s>>>(f, out, a, b, ix.numel);
  } else {
    BinaryKernel<<<Blocks(ix.numel), kThreads, 0, s>>>(f, out, a, b, ix);
  }
  return cudaGetLastError();
}

template <typename F>
cudaError_t Unary(const F& f, float* out, const float* a, const Indexer& ix, cudaStream_t s) {
  if (ix.numel == 0) return cudaSuccess;
  UnaryKernel<<<Blocks(ix.numel), kThreads, 0, s>>>(f, out, a, ix);
  return cudaGetLastError();
}

// The functors kernels.h lists, one instantiation each.
#define DDP_BINARY_LAUNCHER(F)                                                                        \
  template cudaError_t Binary<functors::F>(const functors::F&, float*, const float*, const float*, \
                                           const Indexer&, cudaStream_t);
#define DDP_UNARY_LAUNCHER(F)                                                                       \
  template cudaError_t Unary<functors::F>(const functors::F&, float*, const float*, const Indexer&, \
                                          cudaStream_t);
DDP_BINARY_LAUNCHER(Add)
DDP_BINARY_LAUNCHER(Sub)
DDP_BINARY_LAUNCHER(Mul)
DDP_BINARY_LAUNCHER(Div)
DDP_BINARY_LAUNCHER(Axpy)
DDP_BINARY_LAUNCHER(ScaledCopy)
DDP_BINARY_LAUNCHER(ReluBackward)
DDP_BINARY_LAUNCHER(Assign)
DDP_UNARY_LAUNCHER(AddScalar)
DDP_UNARY_LAUNCHER(MulScalar)
DDP_UNARY_LAUNCHER(Neg)
DDP_UNARY_LAUNCHER(Relu)
DDP_UNARY_LAUNCHER(Exp)
DDP_UNARY_LAUNCHER(Log)
DDP_UNARY_LAUNCHER(Sqrt)
DDP_UNARY_LAUNCHER(Fill)
#undef DDP_BINARY_LAUNCHER
#undef DDP_UNARY_LAUNCHER

cudaError_t StridedCopy(void* out, const void* in, int element_size, const Indexer& ix, cudaStream_t s) {
  if (ix.numel == 0) return cudaSuccess;
  switch (element_size) {
    case 2:
      StridedCopyKernel<<<Blocks(ix.numel), kThreads, 0, s>>>(static_cast<uint16_t*>(out),
                                                              static_cast<const uint16_t*>(in), ix);
      break;
    case 4:
      StridedCopyKernel<<<Blocks(ix.numel), kThreads, 0, s>>>(static_cast<uint32_t*>(out),
                                                              static_cast<const uint32_t*>(in), ix);
      break;
    case 8:
      StridedCopyKernel<<<Blocks(ix.numel), kThreads, 0, s>>>(static_cast<uint64_t*>(out),
                                                              static_cast<const uint64_t*>(in), ix);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t Convert(void* out, ElementType to, const void* in, ElementType from, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  ConvertKernel<<<Blocks(n), kThreads, 0, s>>>(out, to, in, from, n);
  return cudaGetLastError();
}

cudaError_t FillInt64(int64_t* out, int64_t value, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  FillInt64Kernel<<<Blocks(n), kThreads, 0, s>>>(out, value, n);
  return cudaGetLastError();
}

cudaError_t DropoutMask(float* mask, int64_t n, float p, float scale, uint64_t seed, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  DropoutMaskKernel<<<Blocks(n), kThreads, 0, s>>>(mask, n, p, scale, seed);
  return cudaGetLastError();
}

cudaError_t SgdStep(const functors::SgdStep& step, float* param, float* buf, const float* grad, int64_t n,
                    cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  SgdKernel<<<Blocks(n), kThreads, 0, s>>>(step, param, buf, grad, n);
  return cudaGetLastError();
}

cudaError_t AdamStep(const functors::AdamStep& step, float* param, float* m, float* v, const float* grad,
                     int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  AdamKernel<<<Blocks(n), kThreads, 0, s>>>(step, param, m, v, grad, n);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace cuda
}  // namespace ddp
