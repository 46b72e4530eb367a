// The im2col gather kernel for any element type: the float32 convolution (conv_pool_bn.cu) and the bf16 /
// fp16 autocast convolution (low_precision.cu) unfold images with the same index arithmetic. Internal to
// the .cu files of tensor/cuda (nvcc only).
#ifndef DDP_TENSOR_CUDA_IM2COL_CUH_
#define DDP_TENSOR_CUDA_IM2COL_CUH_

#include <cstdint>

#include "tensor/cuda/kernels.h"
#include "tensor/cuda/launch.cuh"

namespace ddp {
namespace cuda {
namespace kernels {

// Element (row, column) of col [K, count*P]: row = (ch, ki, kj), column = (image, oy, ox); T() (zero, or
// the +0 bit pattern of a 16-bit type) outside the image.
template <typename T>
__global__ void Im2ColKernel(const T* x, ConvShape g, int64_t first, int64_t count, T* col) {
  const int64_t P = g.oh * g.ow, cols = count * P, K = g.c * g.kh * g.kw;
  DDP_GRID_LOOP(i, K * cols) {
    const int64_t row = i / cols, column = i % cols;
    const int64_t image = column / P, p = column % P;
    const int64_t oy = p / g.ow, ox = p % g.ow;
    const int64_t kj = row % g.kw, ki = (row / g.kw) % g.kh, ch = row / (g.kw * g.kh);
    const int64_t iy = oy * g.stride + ki - g.padding, ix = ox * g.stride + kj - g.padding;
    T v = T();
    if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) {
      v = x[(((first + image) * g.c + ch) * g.h + iy) * g.w + ix];
    }
    col[i] = v;
  }
}

}  // namespace kernels
}  // namespace cuda
}  // namespace ddp

#endif  // DDP_TENSOR_CUDA_IM2COL_CUH_
