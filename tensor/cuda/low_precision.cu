// The kernels of CUDA autocast (tensor/autocast.h): rounding float32 to bf16 / fp16 with the functors the
// CPU runs (tensor/low_precision_round.h), widening back, and im2col on 16-bit elements; and the scaled
// rounding into the Reducer's bfloat16 buckets (Note [Reduce dtype rounding], reducer/bucket_cast.h).
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/im2col.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/low_precision_round.h"

namespace ddp {
namespace cuda {
namespace kernels {
namespace {

template <typename Round>
__global__ void RoundKernel(Round round, const float* in, uint16_t* out, int64_t n) {
  DDP_GRID_LOOP(i, n) { out[i] = round(in[i]); }
}

template <typename Widen>
__global__ void WidenKernel(Widen widen, const uint16_t* in, float* out, int64_t n) {
  DDP_GRID_LOOP(i, n) { out[i] = widen(in[i]); }
}

}  // namespace

cudaError_t RoundScaledToBFloat16(const float* in, float scale, uint16_t* out, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  RoundKernel<<<Blocks(n), kThreads, 0, s>>>(functors::RoundScaledToBFloat16{scale}, in, out, n);
  return cudaGetLastError();
}

cudaError_t RoundToLowPrecision(const float* in, uint16_t* out, ElementType to, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (to == ElementType::kBFloat16) {
    RoundKernel<<<Blocks(n), kThreads, 0, s>>>(functors::RoundToBFloat16(), in, out, n);
  } else if (to == ElementType::kFloat16) {
    RoundKernel<<<Blocks(n), kThreads, 0, s>>>(functors::RoundToHalf(), in, out, n);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t WidenLowPrecision(const uint16_t* in, ElementType from, float* out, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (from == ElementType::kBFloat16) {
    WidenKernel<<<Blocks(n), kThreads, 0, s>>>(functors::BFloat16ToFloat32(), in, out, n);
  } else if (from == ElementType::kFloat16) {
    WidenKernel<<<Blocks(n), kThreads, 0, s>>>(functors::HalfToFloat32(), in, out, n);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t Im2Col16(const uint16_t* x, const ConvShape& g, int64_t first, int64_t count, uint16_t* col,
                     cudaStream_t s) {
  const int64_t n = g.c * g.kh * g.kw * count * g.oh * g.ow;
  if (n == 0) return cudaSuccess;
  Im2ColKernel<uint16_t><<<Blocks(n), kThreads, 0, s>>>(x, g, first, count, col);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace cuda
}  // namespace ddp
