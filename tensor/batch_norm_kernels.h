// For tensor/ops_batchnorm.cc: BatchNorm's per-channel kernels on either device (CPU loops, or CUDA
// kernels in tensor/cuda/conv_pool_bn.cu with --config=cuda), each branching on its input's device.
// They check nothing and record no autograd; the shapes are the op's to check.
//
// x (and gy) are contiguous float32 [n, c, *] (channel dim 1, viewed as [n, c, inner]); mean and invstd
// are contiguous float32 [c]; weight, bias, var and the running statistics are float32 [c] of any
// stride. All on one device. Sums accumulate in double.
#ifndef DDP_TENSOR_BATCH_NORM_KERNELS_H_
#define DDP_TENSOR_BATCH_NORM_KERNELS_H_

#include <cstdint>
#include <vector>

#include "base/default_init_allocator.h"
#include "tensor/tensor.h"

namespace ddp {

// x [n, c, *] viewed as [n, c, inner]. REQUIRES: x.dim() >= 2.
struct BatchNormShape {
  int64_t n, c, inner;
  int64_t count() const { return n * inner; }  // values per channel
};
BatchNormShape BatchNormShapeOf(const Tensor& x);

// Element ch of a float32 [c] tensor of any stride, or `fallback` when t is undefined (a missing weight
// or bias).
float ChannelValueOr(const Tensor& t, int64_t ch, float fallback);

// out[ch] = Σ x over channel ch when `mean` is undefined, else Σ (x - mean[ch])^2. `out` is a
// contiguous float32 [c] (a view is fine) on x's device.
void ChannelSumsInto(const Tensor& x, const Tensor& mean, const Tensor& out);

// A new contiguous [c]: 1 / sqrt(var + eps).
Tensor InverseStd(const Tensor& var, float eps);

// running = (1 - momentum) * running + momentum * batch, the variance unbiased with `count` values per
// channel (var * count / (count - 1), as PyTorch). Either running tensor may be undefined (skipped).
// REQUIRES: count > 1.
void UpdateRunning(const Tensor& running_mean, const Tensor& running_var, const Tensor& mean,
                   const Tensor& var, int64_t count, float momentum);

// A new y = (x - mean) * invstd * weight + bias per channel; undefined weight / bias act as 1 / 0.
Tensor Normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                 const Tensor& bias);

// Where a ReLU output y [n, c, *] is > 0, one bit per element (Note [ReLU mask bits],
// tensor/batch_norm_rows.h): bit j % 8 of byte row * row_bytes + j / 8 for element j of row
// i * c + ch (each row of `inner` elements starts a new byte).
struct ReluMaskBits {
  int64_t row_bytes = 0;      // (inner + 7) / 8
  // n * c * row_bytes; resize() leaves them unwritten: the forward kernels write every byte.
  std::vector<uint8_t, DefaultInitAllocator<uint8_t>> bits;
};

// Sizes `mask` (when not null) for an output of shape `s` and returns its bits to fill, else null.
uint8_t* SizeReluMask(ReluMaskBits* mask, const BatchNormShape& s);

// A new y = relu(Normalize(x, ...) + residual) in one pass, bit for bit what Normalize, then adding
// `residual` (contiguous, x's shape; undefined: nothing added), then ReLU compute. With `bf16_copy`
// defined (contiguous bf16, x's shape) the same pass writes y rounded as ToBFloat16Contiguous rounds it
// there (Note [Autocast copies from the producer], tensor/autocast.h); with `relu_mask` it fills that
// with y's mask. CPU only.
Tensor NormalizeAddRelu(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias, const Tensor& residual, const Tensor& bf16_copy = Tensor(),
                        ReluMaskBits* relu_mask = nullptr);

// sums [2c] (contiguous, on x's device) = {Σ gy, Σ gy * (x - mean)} per channel.
void BackwardSumsInto(const Tensor& gy, const Tensor& x, const Tensor& mean, const Tensor& sums);

// BackwardSumsInto of the ReLU-masked output gradient: masked (contiguous, x's shape, written) =
// functors::ReluBackward(gy, y) element by element, with y's ReLU output given by its mask, and sums over
// it in the same pass: the numbers of MapBinary(gy, y, ReluBackward) followed by BackwardSumsInto, one
// read of the masked gradient fewer. gy contiguous, x's shape; `relu_mask` of x's shape. CPU only.
void ReluMaskedBackwardSumsInto(const Tensor& gy, const ReluMaskBits& relu_mask, const Tensor& x,
                                const Tensor& mean, const Tensor& masked, const Tensor& sums);

// A new input gradient gx = k * gy + a * (x - mean) + b per channel (Note [BatchNorm pieces],
// tensor/ops_batchnorm.cc) from BackwardSumsInto's `sums` over `count` values per channel. Without
// `training` the statistics are constants: a = b = 0 (sums and count unused).
Tensor InputGrad(const Tensor& gy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                 const Tensor& weight, const Tensor& sums, int64_t count, bool training);

}  // namespace ddp

#endif  // DDP_TENSOR_BATCH_NORM_KERNELS_H_
