// im2col and its adjoint, col2im, for Conv2d's CPU kernels (tensor/conv_kernels.cc): the unfolding of
// images into the column matrix one GEMM per group of images multiplies (Note [Conv2d image groups]),
// and the accumulation of such a matrix back into input gradients. Internal to the tensor floor.
#ifndef DDP_TENSOR_IM2COL_H_
#define DDP_TENSOR_IM2COL_H_

#include <cstdint>

#include "tensor/conv_kernels.h"
#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

// Unfolds images [first, first + count) of x [n, c, h, w] into col [K, count * P] (K = c * kh * kw rows
// (ch, ki, kj); image i's P output pixels at columns i * P...): row (ch, ki, kj) holds x[ch, oy * stride +
// ki - padding, ox * stride + kj - padding] at column oy * ow + ox, 0 outside the image. float, or
// BFloat16 for mixed precision's bf16 GEMMs.
void Im2ColGroup(const float* x, const ConvGeometry& g, int64_t first, int64_t count, float* col);
void Im2ColGroup(const BFloat16* x, const ConvGeometry& g, int64_t first, int64_t count, BFloat16* col);

// The adjoint of Im2ColGroup: accumulates col [K, count * P] of images [first, first + count) into their
// input gradients gx [n, c, h, w] (added to what gx holds), each element's contributions in row order.
// May overwrite col, which is scratch.
void Col2ImGroup(float* col, const ConvGeometry& g, int64_t first, int64_t count, float* gx);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_IM2COL_H_
