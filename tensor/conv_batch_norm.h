// A convolution and the BatchNorm (+ residual + ReLU) after it as one op, for ResNet's blocks under bf16
// autocast (Note [Convolution and BatchNorm in one op under bf16]).
//
// Note [Convolution and BatchNorm in one op under bf16]
// In ResNet every convolution (bias-free) feeds only its BatchNorm. Under bf16 autocast on channels-last
// CPU activations, run as two ops, BatchNorm's backward writes its float32 input gradient and its bf16
// copy (Note [bf16 copies of BatchNorm's input gradient]), and the convolution's backward reads only the
// copy: the float32 gradient is written (and allocated) for nothing. The fused op runs the same two ops'
// code, Conv2d's forward on the bf16 input and weight (AutocastCastChannelsLast, AutocastCast: cached
// casts and producers' copies as for Conv2d) into a float32 output, then BatchNormAddRelu's passes over
// it; backward, BatchNormAddRelu's backward writing only the bf16 input gradient, then Conv2d's backward
// from it. The results are Conv2d then BatchNormAddRelu bit for bit (tensor/conv_batch_norm_test.cc). The
// convolution's output stays float32 on purpose: kept in bf16, as PyTorch's autocast convolution returns
// it, BatchNorm would read half the bytes, but resnet18's one-epoch recipe trains to a lower test
// accuracy that way (BatchNorm normalises the rounded values; BENCHMARKS.md "Mixed precision: accuracy").
// Everywhere else (no bf16 autocast, a GPU, NCHW activations, eval mode) the op is Conv2d then
// BatchNormAddRelu.
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
