// Reductions, argmax, log-softmax and the losses.
#include <cmath>

#include "tensor/cuda/kernels.h"
#include "tensor/cuda/launch.cuh"

namespace ddp {
namespace cuda {
namespace kernels {
namespace {

__device__ __forceinline__ int64_t Offset(const Indexer& ix, int64_t i) {
  int64_t offset = 0;
  for (int d = ix.ndim - 1; d >= 0; --d) {
    const int64_t size = ix.shape[d];
    offset += (i % size) * ix.strides[0][d];
    i /= size;
  }
  return offset;
}

// Sum of `value` over the block (kThreads threads), valid in thread 0.
template <typename T>
__device__ T BlockSum(T value) {
  __shared__ T partial[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  value = threadIdx.x < kThreads / 32 ? partial[threadIdx.x] : T(0);
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  return value;
}

__device__ float BlockMax(float value) {
  __shared__ float partial[kThreads / 32];
  __shared__ float result;
  for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_down_sync(0xffffffffu, value, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = threadIdx.x < kThreads / 32 ? partial[threadIdx.x] : -INFINITY;
    for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_down_sync(0xffffffffu, value, offset));
    if (lane == 0) result = value;
  }
  __syncthreads();
  return result;
}

__global__ void SumAllKernel(const float* x, int64_t n, float* out) {
  double total = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) total += x[i];
  total = BlockSum(total);
  if (threadIdx.x == 0) *out = static_cast<float>(total);
}

// One thread per output element; each walks the reduced index space.
__global__ void SumReduceKernel(const float* x, float* out, Indexer kept, Indexer reduced) {
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < kept.numel;
       o += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const float* base = x + Offset(kept, o);
    float total = 0.0f;
    for (int64_t r = 0; r < reduced.numel; ++r) total += base[Offset(reduced, r)];
    out[o] = total;
  }
}

// One block per output element when few outputs reduce many elements each.
__global__ void SumReduceBlockKernel(const float* x, float* out, Indexer kept, Indexer reduced) {
  const float* base = x + Offset(kept, blockIdx.x);
  float total = 0.0f;
  for (int64_t r = threadIdx.x; r < reduced.numel; r += blockDim.x) total += base[Offset(reduced, r)];
  total = BlockSum(total);
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}

__global__ void ArgmaxKernel(const float* x, int64_t* out, int64_t outer, int64_t n, int64_t inner) {
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < outer * inner;
       o += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t a = o / inner, b = o % inner;
    const float* base = x + a * n * inner + b;
    int64_t best = 0;
    for (int64_t k = 1; k < n; ++k) {
      if (base[k * inner] > base[best * inner]) best = k;
    }
    out[o] = best;
  }
}

__global__ void LogSoftmaxKernel(const float* x, float* y, int64_t cols) {
  const float* in = x + blockIdx.x * cols;
  float* o = y + blockIdx.x * cols;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, in[c]);
  m = BlockMax(m);
  double total = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) total += exp(static_cast<double>(in[c] - m));
  __shared__ float log_total;
  total = BlockSum(total);
  if (threadIdx.x == 0) log_total = static_cast<float>(log(total)) + m;
  __syncthreads();
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = in[c] - log_total;
}

__global__ void LogSoftmaxBackwardKernel(const float* g, const float* y, float* dx, int64_t cols) {
  const int64_t row = blockIdx.x * cols;
  double total = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) total += g[row + c];
  __shared__ float sum;
  total = BlockSum(total);
  if (threadIdx.x == 0) sum = static_cast<float>(total);
  __syncthreads();
  const functors::LogSoftmaxBackward grad{sum};
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dx[row + c] = grad(g[row + c], y[row + c]);
}

__global__ void NllLossKernel(const float* lp, const int64_t* target, int64_t rows, int64_t classes, float* out) {
  double total = 0.0;
  bool bad = false;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    const int64_t t = target[i];
    if (t < 0 || t >= classes) {
      bad = true;
    } else {
      total -= lp[i * classes + t];
    }
  }
  total = BlockSum(total);
  const int any_bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) *out = (rows == 0 || any_bad) ? NAN : static_cast<float>(total / rows);
}

__global__ void NllLossBackwardKernel(const float* g, const int64_t* target, float* dx, int64_t rows,
                                      int64_t classes) {
  const float scale = -*g / static_cast<float>(rows);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * classes;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    dx[i] = target[i / classes] == i % classes ? scale : 0.0f;
  }
}

__global__ void CrossEntropyBackwardKernel(const float* lp, const int64_t* target, const float* g, float* dx,
                                           int64_t rows, int64_t classes) {
  const functors::CrossEntropyBackward grad{*g / static_cast<float>(rows)};
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * classes;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    dx[i] = grad(lp[i], target[i / classes] == i % classes);
  }
}

}  // namespace

cudaError_t SumAll(const float* x, int64_t n, float* out, cudaStream_t s) {
  SumAllKernel<<<1, kThreads, 0, s>>>(x, n, out);
  return cudaGetLastError();
}

cudaError_t SumReduce(const float* x, float* out, const Indexer& kept, const Indexer& reduced, cudaStream_t s) {
  if (kept.numel == 0) return cudaSuccess;
  if (kept.numel < 1024 && reduced.numel >= 256 && kept.numel <= 65535) {
    SumReduceBlockKernel<<<static_cast<int>(kept.numel), kThreads, 0, s>>>(x, out, kept, reduced);
  } else {
    SumReduceKernel<<<Blocks(kept.numel), kThreads, 0, s>>>(x, out, kept, reduced);
  }
  return cudaGetLastError();
}

cudaError_t Argmax(const float* x, int64_t* out, int64_t outer, int64_t n, int64_t inner, cudaStream_t s) {
  if (outer * inner == 0) return cudaSuccess;
  ArgmaxKernel<<<Blocks(outer * inner), kThreads, 0, s>>>(x, out, outer, n, inner);
  return cudaGetLastError();
}

cudaError_t LogSoftmax(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  LogSoftmaxKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, y, cols);
  return cudaGetLastError();
}

cudaError_t LogSoftmaxBackward(const float* g, const float* y, float* dx, int64_t rows, int64_t cols,
                               cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  LogSoftmaxBackwardKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(g, y, dx, cols);
  return cudaGetLastError();
}

cudaError_t NllLoss(const float* lp, const int64_t* target, int64_t rows, int64_t classes, float* out,
                    cudaStream_t s) {
  NllLossKernel<<<1, kThreads, 0, s>>>(lp, target, rows, classes, out);
  return cudaGetLastError();
}

cudaError_t NllLossBackward(const float* g, const int64_t* target, float* dx, int64_t rows, int64_t classes,
                            cudaStream_t s) {
  if (rows * classes == 0) return cudaSuccess;
  NllLossBackwardKernel<<<Blocks(rows * classes), kThreads, 0, s>>>(g, target, dx, rows, classes);
  return cudaGetLastError();
}

cudaError_t CrossEntropyBackward(const float* lp, const int64_t* target, const float* g, float* dx,
                                 int64_t rows, int64_t classes, cudaStream_t s) {
  if (rows * classes == 0) return cudaSuccess;
  CrossEntropyBackwardKernel<<<Blocks(rows * classes), kThreads, 0, s>>>(lp, target, g, dx, rows, classes);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace cuda
}  // namespace ddp
