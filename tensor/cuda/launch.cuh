// The launch shape every element-wise CUDA kernel of tensor/cuda uses: kThreads threads per block, a grid
// of Blocks(n) blocks (capped; the kernels loop), and DDP_GRID_LOOP to visit each of n elements once.
// Internal to the .cu files of tensor/cuda (nvcc only).
#ifndef DDP_TENSOR_CUDA_LAUNCH_CUH_
#define DDP_TENSOR_CUDA_LAUNCH_CUH_

#include <cstdint>

namespace ddp {
namespace cuda {
namespace kernels {

constexpr int kThreads = 256;

// Blocks for n elements at kThreads per block: at least one, at most 65535 * 32 (grid-stride loops cover
// the rest).
inline int Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 * 32 ? (blocks > 0 ? blocks : 1) : 65535 * 32);
}

}  // namespace kernels
}  // namespace cuda
}  // namespace ddp

// for (int64_t i = ...; i < n; ...) over this thread's elements of a grid-stride loop.
#define DDP_GRID_LOOP(i, n)                                                                  \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

#endif  // DDP_TENSOR_CUDA_LAUNCH_CUH_
