// CPU kernels of MaxPool2d over one [h, w] plane, shared by the pooling ops (tensor/ops_pool.cc) and the
// convolution fused with ReLU and MaxPool2d (tensor/ops_conv_pool.cc). Internal to the tensor floor.
#ifndef DDP_TENSOR_POOL_KERNELS_H_
#define DDP_TENSOR_POOL_KERNELS_H_

#include <cstdint>
#include <limits>

#include "tensor/tensor.h"

namespace ddp {
namespace cpu {

// `planes` planes of [h, w] pooled by kernel x kernel windows at `stride` into [oh, ow].
struct PoolGeometry {
  int64_t planes, h, w, kernel, stride, oh, ow;
};

// The geometry of MaxPool2d over x [n, c, h, w] (stride >= 1); dies through DDP_CHECK naming the shape
// when x is not 4-d, the kernel or stride is below 1, or the kernel is larger than the plane.
PoolGeometry CheckPoolShapes(const Shape& x, int64_t kernel, int64_t stride);

// Set in an index whose window had no positive value under `relu`: backward adds 0 there (Note [ReLU then
// MaxPool2d in one pass], tensor/ops_pool.cc).
inline constexpr int32_t kNoGradient = std::numeric_limits<int32_t>::min();

// y [oh, ow] = the max over each window of the plane x [h, w] (of Relu(x) when `relu`) and index [oh, ow] =
// the winner's offset in the plane (kNoGradient set when `relu` and no value is positive), in PyTorch's
// scan order: ties keep the first maximum; NaN wins and propagates, or with `relu` never wins.
void MaxPoolPlane(const float* x, const PoolGeometry& g, bool relu, float* y, int32_t* index);

// gx [h, w] = 0 except gx[index[o]] += gy[o] for each output o of one plane; an index with kNoGradient set
// adds nothing. Every value of gx is written (stale values do not survive); 2x2 windows with stride 2 are
// written window by window (Note [Pooling gradients window by window] in tensor/pool_kernels.cc).
void MaxPoolBackwardPlane(const float* gy, const int32_t* index, const PoolGeometry& g, float* gx);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_POOL_KERNELS_H_
