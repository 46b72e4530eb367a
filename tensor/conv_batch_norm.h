// A convolution and the BatchNorm (+ residual + ReLU) after it as one op, for ResNet's blocks under bf16
// autocast (Note [Convolution and BatchNorm in one op under bf16]).
//
// Note [Convolution and BatchNorm in one op under bf16]
// In ResNet every convolution (bias-free) feeds only its BatchNorm. Under bf16 autocast on channels-last
// CPU activations, run as two ops, the convolution writes its float32 sums, BatchNorm reads them three
// times in forward and twice in backward, and writes a float32 input gradient that the convolution's
// backward only reads rounded to bf16. The fused op keeps the convolution's output as bf16 (its float32
// sums rounded to nearest, as PyTorch's autocast convolution returns it) where no one else can see it:
// half the bytes written and read back in each of those passes, and the input gradient of BatchNorm
// exists only as the bf16 operand the convolution's backward multiplies. Forward: the convolution on the
// bf16 input and weight (AutocastCastChannelsLast, AutocastCast: cached casts and producers' copies as
// for Conv2d), rounded; then BatchNormAddRelu's statistics and output over those bf16 values (statistics,
// output and the next convolution's bf16 copy as BatchNormAddRelu computes them from the same values).
// Backward: BatchNormAddRelu's backward over the bf16 values, its input gradient rounded to bf16 as
// Conv2d's backward would round it (the same bits), then Conv2d's backward from that. So against
// Conv2d followed by BatchNormAddRelu under autocast the one difference is the rounding of the
// convolution's output before BatchNorm, which is PyTorch autocast's own (results within bf16 tolerance:
// tensor/conv_batch_norm_test.cc). Everywhere else (no bf16 autocast, a GPU, NCHW activations, eval
// mode) the op is exactly Conv2d then BatchNormAddRelu.
#ifndef DDP_TENSOR_CONV_BATCH_NORM_H_
#define DDP_TENSOR_CONV_BATCH_NORM_H_

#include <cstdint>

#include "tensor/tensor.h"

namespace ddp {

// True when ConvBatchNormAddRelu on input x in this mode runs as one op (bf16 autocast on this thread, x a
// channels-last 4-d CPU tensor, training); false: it runs Conv2d then BatchNormAddRelu.
bool ConvBatchNormFuses(const Tensor& x, bool training);

// relu(BatchNorm(Conv2d(x, conv_weight, no bias, stride, padding)) + residual) (undefined residual:
// nothing added), with BatchNorm's weight, bias, running statistics, training, momentum and eps as
// BatchNormAddRelu (tensor/batch_norm.h) takes them; running statistics updated as BatchNorm updates them
// when training. Under bf16 autocast on a channels-last CPU x in training, one op (Note [Convolution and
// BatchNorm in one op under bf16]); otherwise Conv2d then BatchNormAddRelu. Dies as those ops on bad
// shapes (naming them).
Tensor ConvBatchNormAddRelu(const Tensor& x, const Tensor& conv_weight, int64_t stride, int64_t padding,
                            const Tensor& residual, const Tensor& weight, const Tensor& bias,
                            const Tensor& running_mean, const Tensor& running_var, bool training,
                            float momentum, float eps);

}  // namespace ddp

#endif  // DDP_TENSOR_CONV_BATCH_NORM_H_
