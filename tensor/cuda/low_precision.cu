// The kernels of CUDA autocast (tensor/autocast.h): rounding float32 to bf16 / fp16 with the functors the
// CPU runs (tensor/low_precision_round.h), widening back, and im2col on 16-bit elements.
#include "tensor/cuda/kernels.h"
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

// As Im2ColKernel (conv_pool_bn.cu) on 16-bit elements; +0 (bits 0) outside the image in bf16 and fp16.
__global__ void Im2Col16Kernel(const uint16_t* x, ConvShape g, int64_t first, int64_t count, uint16_t* col) {
  const int64_t P = g.oh * g.ow, cols = count * P, K = g.c * g.kh * g.kw;
  DDP_GRID_LOOP(i, K * cols) {
    const int64_t row = i / cols, column = i % cols;
    const int64_t image = column / P, p = column % P;
    const int64_t oy = p / g.ow, ox = p % g.ow;
    const int64_t kj = row % g.kw, ki = (row / g.kw) % g.kh, ch = row / (g.kw * g.kh);
    const int64_t iy = oy * g.stride + ki - g.padding, ix = ox * g.stride + kj - g.padding;
    uint16_t v = 0;
    if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) v = x[(((first + image) * g.c + ch) * g.h + iy) * g.w + ix];
    col[i] = v;
  }
}

}  // namespace

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
  Im2Col16Kernel<<<Blocks(n), kThreads, 0, s>>>(x, g, first, count, col);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace cuda
}  // namespace ddp
