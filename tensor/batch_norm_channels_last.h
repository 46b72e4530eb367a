// Training-mode BatchNorm's CPU passes for inputs with one value per (row, channel): x [n, c] viewed as
// BatchNormShape {n, c, inner = 1}, e.g. BatchNorm1d's [batch, features] or the [N*H*W, C] view of a
// channels-last activation (Note [BatchNorm over channels in lanes], tensor/batch_norm_channels_last.cc).
// For tensor/batch_norm_blocked.cc and tensor/batch_norm_kernels.cc, which run these wherever inner == 1 on
// the CPU: the same numbers as the row loops, bit for bit. Nothing is checked; no autograd.
#ifndef DDP_TENSOR_BATCH_NORM_CHANNELS_LAST_H_
#define DDP_TENSOR_BATCH_NORM_CHANNELS_LAST_H_

#include <cstdint>

#include "tensor/batch_norm_rows.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace ddp {
namespace batch_norm_channels_last {

// The forward's arrays, all contiguous over [rows, channels] or [channels].
struct ForwardArrays {
  const float* x;
  const float* residual;  // null: nothing added
  float* mean;            // [channels], written
  float* var;             // [channels], written (biased)
  float* invstd;          // [channels], written
  float* y;               // written
  BFloat16* copy;         // null: no bf16 copy
  uint8_t* mask;          // null: no ReLU mask; else one byte per element, 1 where y > 0 (ReluMaskBits'
                          // layout for inner == 1: row_bytes 1, bit 0)
};

// The batch statistics over the rows, then y = Normalize(x), or with `relu` relu(Normalize(x) +
// residual) with its bf16 copy and mask (residual, copy and mask need `relu`). weight / bias: float32
// [channels] of any stride, or undefined (1 / 0). REQUIRES: rows > 1.
void TrainingForward(int64_t rows, int64_t channels, float eps, const Tensor& weight, const Tensor& bias,
                     bool relu, const ForwardArrays& arrays);

// The output pass alone with per-channel coefficients affine[ch] (batch_norm_rows::AffineOf), as
// TrainingForward's last pass; `arrays`' statistics are not used.
void Normalize(int64_t rows, int64_t channels, const batch_norm_rows::AffineCoefficients* affine, bool relu,
               const ForwardArrays& arrays);

// The backward's arrays, all contiguous over [rows, channels] or [channels].
struct BackwardArrays {
  const float* gy;
  const uint8_t* mask;  // null: gy as it is; else TrainingForward's mask, gy masked by it
  const float* x;
  const float* mean;
  const float* invstd;
  float* masked;  // null: not stored; else the masked gradient is written here (needs `mask`)
  float* sum_g;   // [channels], written: Σ g
  float* sum_gx;  // [channels], written: Σ g (x - mean)
  float* gx;      // written: the input gradient; null when gx_copy is not: only the copy is kept
  BFloat16* gx_copy = nullptr;  // null: none; else gx rounded to bf16 (FloatToBFloat16Run's bits) in the
                                // pass that writes gx (Note [bf16 copies of BatchNorm's input gradient])
};

// The training backward of TrainingForward over g = gy (masked where `mask` is given): the sums, then the
// input gradient (weight as TrainingForward takes it).
void TrainingBackward(int64_t rows, int64_t channels, const Tensor& weight, const BackwardArrays& arrays);

}  // namespace batch_norm_channels_last
}  // namespace ddp

#endif  // DDP_TENSOR_BATCH_NORM_CHANNELS_LAST_H_
