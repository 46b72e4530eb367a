// Convolution helpers (im2col, col2im, layout swaps), max pooling and batch normalisation.
#include <cmath>

#include "tensor/cuda/kernels.h"
#include "tensor/cuda/im2col.cuh"
#include "tensor/cuda/launch.cuh"

namespace ddp {
namespace cuda {
namespace kernels {
namespace {

// One thread per input element: gathers every col entry that read it.
__global__ void Col2ImKernel(const float* col, ConvShape g, int64_t first, int64_t count, float* gx) {
  const int64_t P = g.oh * g.ow, cols = count * P;
  DDP_GRID_LOOP(i, count * g.c * g.h * g.w) {
    const int64_t x = i % g.w, y = (i / g.w) % g.h, ch = (i / (g.w * g.h)) % g.c, image = i / (g.w * g.h * g.c);
    float total = 0.0f;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const int64_t ty = y + g.padding - ki;
      if (ty < 0 || ty % g.stride != 0) continue;
      const int64_t oy = ty / g.stride;
      if (oy >= g.oh) continue;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const int64_t tx = x + g.padding - kj;
        if (tx < 0 || tx % g.stride != 0) continue;
        const int64_t ox = tx / g.stride;
        if (ox >= g.ow) continue;
        const int64_t row = (ch * g.kh + ki) * g.kw + kj;
        total += col[row * cols + image * P + oy * g.ow + ox];
      }
    }
    gx[(first * g.c * g.h * g.w) + i] += total;
  }
}

__global__ void SwapOuterKernel(const float* src, float* dst, int64_t A, int64_t B, int64_t C, const float* bias) {
  DDP_GRID_LOOP(i, A * B * C) {  // i indexes dst [B, A, C]
    const int64_t c = i % C, a = (i / C) % A, b = i / (C * A);
    const float v = src[(a * B + b) * C + c];
    dst[i] = bias != nullptr ? v + bias[a] : v;
  }
}

__global__ void MaxPoolForwardKernel(const float* x, float* y, int32_t* index, int64_t planes, int64_t h,
                                     int64_t w, int64_t kernel, int64_t stride, int64_t oh, int64_t ow) {
  DDP_GRID_LOOP(i, planes * oh * ow) {
    const int64_t ox = i % ow, oy = (i / ow) % oh, plane = i / (ow * oh);
    const float* in = x + plane * h * w;
    const int64_t start = oy * stride * w + ox * stride;
    float best = -INFINITY;
    int64_t best_at = start;
    for (int64_t ki = 0; ki < kernel; ++ki) {
      for (int64_t kj = 0; kj < kernel; ++kj) {
        const int64_t at = start + ki * w + kj;
        const float v = in[at];
        if (v > best || isnan(v)) {
          best = v;
          best_at = at;
        }
      }
    }
    y[i] = best;
    index[i] = static_cast<int32_t>(best_at);
  }
}

__global__ void ZeroKernel(float* p, int64_t n) {
  DDP_GRID_LOOP(i, n) p[i] = 0.0f;
}

__global__ void MaxPoolBackwardKernel(const float* gy, const int32_t* index, float* gx, int64_t planes,
                                      int64_t in_plane, int64_t out_plane) {
  DDP_GRID_LOOP(i, planes * out_plane) {
    const int64_t plane = i / out_plane;
    atomicAdd(gx + plane * in_plane + index[i], gy[i]);
  }
}

// Sum of `value` over the block, valid in every thread.
__device__ double BlockSumAll(double value) {
  __shared__ double partial[kThreads / 32];
  __shared__ double result;
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = threadIdx.x < kThreads / 32 ? partial[threadIdx.x] : 0.0;
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
    if (lane == 0) result = value;
  }
  __syncthreads();
  return result;
}

// One block per channel.
__global__ void BatchNormChannelSumsKernel(const float* x, int64_t n, int64_t c, int64_t inner, const float* mean,
                                           float* out) {
  const int64_t ch = blockIdx.x, count = n * inner;
  const double m = mean != nullptr ? mean[ch] : 0.0;
  double total = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const double v = x[((i / inner) * c + ch) * inner + i % inner];
    total += mean != nullptr ? (v - m) * (v - m) : v;
  }
  total = BlockSumAll(total);
  if (threadIdx.x == 0) out[ch] = static_cast<float>(total);
}

__global__ void BatchNormUpdateRunningKernel(float* rm, int64_t ms, float* rv, int64_t vs, const float* mean,
                                             const float* var, int64_t c, int64_t count, float momentum) {
  const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
  DDP_GRID_LOOP(ch, c) {
    if (rm != nullptr) rm[ch * ms] = static_cast<float>((1.0 - momentum) * rm[ch * ms] + momentum * mean[ch]);
    if (rv != nullptr) {
      rv[ch * vs] = static_cast<float>((1.0 - momentum) * rv[ch * vs] + momentum * var[ch] * unbias);
    }
  }
}

__global__ void BatchNormInvStdKernel(const float* var, int64_t vs, int64_t c, float eps, float* invstd) {
  DDP_GRID_LOOP(ch, c) invstd[ch] = static_cast<float>(1.0 / sqrt(static_cast<double>(var[ch * vs]) + eps));
}

__global__ void BatchNormApplyKernel(const float* x, int64_t n, int64_t c, int64_t inner, const float* mean,
                                     const float* invstd, const float* weight, int64_t ws, const float* bias,
                                     int64_t bs, float* y) {
  DDP_GRID_LOOP(i, n * c * inner) {
    const int64_t ch = (i / inner) % c;
    const float scale = invstd[ch] * (weight != nullptr ? weight[ch * ws] : 1.0f);
    const float shift = (bias != nullptr ? bias[ch * bs] : 0.0f) - mean[ch] * scale;
    y[i] = x[i] * scale + shift;
  }
}

__global__ void BatchNormBackwardSumsKernel(const float* gy, const float* x, const float* mean, int64_t n,
                                            int64_t c, int64_t inner, float* sum_g, float* sum_gx) {
  const int64_t ch = blockIdx.x, count = n * inner;
  const float m = mean[ch];
  double s = 0.0, t = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t at = ((i / inner) * c + ch) * inner + i % inner;
    s += gy[at];
    t += static_cast<double>(gy[at]) * (x[at] - m);
  }
  s = BlockSumAll(s);
  t = BlockSumAll(t);
  if (threadIdx.x == 0) {
    sum_g[ch] = static_cast<float>(s);
    sum_gx[ch] = static_cast<float>(t);
  }
}

__global__ void BatchNormInputGradKernel(const float* gy, const float* x, const float* mean, const float* invstd,
                                         const float* weight, int64_t ws, const float* sum_g, const float* sum_gx,
                                         int64_t n, int64_t c, int64_t inner, double count, bool training,
                                         float* gx) {
  DDP_GRID_LOOP(i, n * c * inner) {
    const int64_t ch = (i / inner) % c;
    const double is = invstd[ch], k = (weight != nullptr ? weight[ch * ws] : 1.0f) * is;
    float a = 0.0f, b = 0.0f;
    if (training) {
      a = static_cast<float>(-k * is * is * sum_gx[ch] / count);
      b = static_cast<float>(-k * sum_g[ch] / count);
    }
    gx[i] = static_cast<float>(k) * gy[i] + a * (x[i] - mean[ch]) + b;
  }
}

}  // namespace

cudaError_t Im2Col(const float* x, const ConvShape& g, int64_t first, int64_t count, float* col, cudaStream_t s) {
  const int64_t n = g.c * g.kh * g.kw * count * g.oh * g.ow;
  if (n == 0) return cudaSuccess;
  Im2ColKernel<float><<<Blocks(n), kThreads, 0, s>>>(x, g, first, count, col);
  return cudaGetLastError();
}

cudaError_t Col2Im(const float* col, const ConvShape& g, int64_t first, int64_t count, float* gx, cudaStream_t s) {
  const int64_t n = count * g.c * g.h * g.w;
  if (n == 0) return cudaSuccess;
  Col2ImKernel<<<Blocks(n), kThreads, 0, s>>>(col, g, first, count, gx);
  return cudaGetLastError();
}

cudaError_t SwapOuterDims(const float* src, float* dst, int64_t A, int64_t B, int64_t C, const float* bias,
                          cudaStream_t s) {
  if (A * B * C == 0) return cudaSuccess;
  SwapOuterKernel<<<Blocks(A * B * C), kThreads, 0, s>>>(src, dst, A, B, C, bias);
  return cudaGetLastError();
}

cudaError_t MaxPoolForward(const float* x, float* y, int32_t* index, int64_t planes, int64_t h, int64_t w,
                           int64_t kernel, int64_t stride, int64_t oh, int64_t ow, cudaStream_t s) {
  if (planes * oh * ow == 0) return cudaSuccess;
  MaxPoolForwardKernel<<<Blocks(planes * oh * ow), kThreads, 0, s>>>(x, y, index, planes, h, w, kernel, stride,
                                                                       oh, ow);
  return cudaGetLastError();
}

cudaError_t MaxPoolBackward(const float* gy, const int32_t* index, float* gx, int64_t planes, int64_t in_plane,
                            int64_t out_plane, cudaStream_t s) {
  if (planes * in_plane > 0) ZeroKernel<<<Blocks(planes * in_plane), kThreads, 0, s>>>(gx, planes * in_plane);
  if (planes * out_plane > 0) {
    MaxPoolBackwardKernel<<<Blocks(planes * out_plane), kThreads, 0, s>>>(gy, index, gx, planes, in_plane,
                                                                          out_plane);
  }
  return cudaGetLastError();
}

cudaError_t BatchNormChannelSums(const float* x, int64_t n, int64_t c, int64_t inner, const float* mean, float* out,
                                 cudaStream_t s) {
  if (c == 0) return cudaSuccess;
  BatchNormChannelSumsKernel<<<static_cast<unsigned>(c), kThreads, 0, s>>>(x, n, c, inner, mean, out);
  return cudaGetLastError();
}

cudaError_t BatchNormUpdateRunning(float* running_mean, int64_t mean_stride, float* running_var, int64_t var_stride,
                                   const float* mean, const float* var, int64_t c, int64_t count, float momentum,
                                   cudaStream_t s) {
  if (c == 0) return cudaSuccess;
  BatchNormUpdateRunningKernel<<<Blocks(c), kThreads, 0, s>>>(running_mean, mean_stride, running_var, var_stride,
                                                               mean, var, c, count, momentum);
  return cudaGetLastError();
}

cudaError_t BatchNormInvStd(const float* var, int64_t var_stride, int64_t c, float eps, float* invstd,
                            cudaStream_t s) {
  if (c == 0) return cudaSuccess;
  BatchNormInvStdKernel<<<Blocks(c), kThreads, 0, s>>>(var, var_stride, c, eps, invstd);
  return cudaGetLastError();
}

cudaError_t BatchNormApply(const float* x, int64_t n, int64_t c, int64_t inner, const float* mean,
                           const float* invstd, const float* weight, int64_t weight_stride, const float* bias,
                           int64_t bias_stride, float* y, cudaStream_t s) {
  if (n * c * inner == 0) return cudaSuccess;
  BatchNormApplyKernel<<<Blocks(n * c * inner), kThreads, 0, s>>>(x, n, c, inner, mean, invstd, weight,
                                                                   weight_stride, bias, bias_stride, y);
  return cudaGetLastError();
}

cudaError_t BatchNormBackwardSums(const float* gy, const float* x, const float* mean, int64_t n, int64_t c,
                                  int64_t inner, float* sum_g, float* sum_gx, cudaStream_t s) {
  if (c == 0) return cudaSuccess;
  BatchNormBackwardSumsKernel<<<static_cast<unsigned>(c), kThreads, 0, s>>>(gy, x, mean, n, c, inner, sum_g,
                                                                             sum_gx);
  return cudaGetLastError();
}

cudaError_t BatchNormInputGrad(const float* gy, const float* x, const float* mean, const float* invstd,
                               const float* weight, int64_t weight_stride, const float* sum_g, const float* sum_gx,
                               int64_t n, int64_t c, int64_t inner, int64_t count, bool training, float* gx,
                               cudaStream_t s) {
  if (n * c * inner == 0) return cudaSuccess;
  BatchNormInputGradKernel<<<Blocks(n * c * inner), kThreads, 0, s>>>(
      gy, x, mean, invstd, weight, weight_stride, sum_g, sum_gx, n, c, inner, static_cast<double>(count), training, gx);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace cuda
}  // namespace ddp
