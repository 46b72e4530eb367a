// Training-mode BatchNorm over a whole batch on the CPU, one block of channels at a time (Note [BatchNorm in
// channel blocks], tensor/batch_norm_blocked.cc): the same numbers as the whole-tensor kernels of
// tensor/batch_norm_kernels.h, bit for bit, with fewer passes over memory. For tensor/ops_batchnorm.cc;
// nothing is checked beyond what each function says, and no autograd is recorded.
//
// x (and gy) are contiguous float32 [n, c, *] on the CPU; weight and bias float32 [c] of any stride or
// undefined (1 / 0); stats.mean and stats.invstd contiguous float32 [c].
#ifndef DDP_TENSOR_BATCH_NORM_BLOCKED_H_
#define DDP_TENSOR_BATCH_NORM_BLOCKED_H_

#include "tensor/batch_norm.h"
#include "tensor/batch_norm_kernels.h"
#include "tensor/tensor.h"

namespace ddp {

// What the forward computes: the batch's statistics and the output.
struct BlockedForward {
  BatchNormStats stats;  // as BatchNormBatchStats(x, eps) without a process group
  Tensor y;              // new, x's shape
};

// BatchNormBatchStats(x, eps), then, with `relu`, NormalizeAddRelu(x, stats..., weight, bias, residual,
// bf16_copy, relu_mask) (residual, bf16_copy and relu_mask as that function takes them), without `relu`
// Normalize(x, stats..., weight, bias) (residual, bf16_copy and relu_mask must be undefined / null).
// Dies naming x's shape unless it has more than one value per channel.
BlockedForward BlockedTrainingForward(const Tensor& x, float eps, const Tensor& weight, const Tensor& bias,
                                      bool relu, const Tensor& residual = Tensor(),
                                      const Tensor& bf16_copy = Tensor(), ReluMaskBits* relu_mask = nullptr);

// The training-mode backward's sums and input gradient without a process group: without `relu_mask`,
// BackwardSumsInto(gy, x, stats.mean, sums) then gx = InputGrad(gy, x, stats..., weight, sums, stats.count,
// true); with it, ReluMaskedBackwardSumsInto(gy, *relu_mask, x, stats.mean, masked, sums) then the input
// gradient of the masked gradient, which is stored in `masked` when that is defined (contiguous, x's
// shape) and otherwise computed again where the input gradient needs it. `sums` (contiguous float32 [2c])
// and `gx` (contiguous, x's shape) are written, and with `gx_copy` (contiguous bf16, x's shape) gx rounded
// to bf16 too (FloatToBFloat16Array's bits; for [rows, c] in the pass that writes gx).
void BlockedTrainingBackward(const Tensor& gy, const ReluMaskBits* relu_mask, const Tensor& x,
                             const BatchNormStats& stats, const Tensor& weight, const Tensor& masked,
                             const Tensor& sums, const Tensor& gx, const Tensor& gx_copy = Tensor());

}  // namespace ddp

#endif  // DDP_TENSOR_BATCH_NORM_BLOCKED_H_
