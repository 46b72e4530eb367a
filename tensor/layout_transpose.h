// Batched matrix transposes in 8x8 register tiles: the channel-order transpose between the engine's NCHW
// activations and the NHWC layout that oneDNN's convolutions run on (tensor/conv_onednn.cc, Note [NHWC
// reorders]), and the weights' [out, c, kh, kw] <-> [out, kh, kw, c] reorders of the channels-last
// convolutions (tensor/conv_channels_last.cc).
#ifndef DDP_TENSOR_LAYOUT_TRANSPOSE_H_
#define DDP_TENSOR_LAYOUT_TRANSPOSE_H_

#include <cstdint>

#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

// dst[i][q][r] = src[i][r][q] for i < batch, r < rows, q < cols: `batch` row-major [rows, cols] float32
// matrices transposed into [cols, rows]. NCHW -> NHWC is rows = C, cols = H*W; NHWC -> NCHW is rows =
// H*W, cols = C. src and dst must not overlap. Thread-safe.
void Transpose32(const float* src, int64_t batch, int64_t rows, int64_t cols, float* dst);

// Transpose32 for bf16 elements (their bits moved, nothing rounded).
void Transpose16(const BFloat16* src, int64_t batch, int64_t rows, int64_t cols, BFloat16* dst);

// dst[i][q][r] = FloatToBFloat16(src[i][r][q]): Transpose32 and the rounding of FloatToBFloat16Array
// (tensor/bf16_convert.h) in one pass over src, each image's float32 transpose held in a per-thread
// buffer. The same bits as rounding src and then transposing it. src and dst must not overlap. Thread-safe.
void TransposeToBFloat16(const float* src, int64_t batch, int64_t rows, int64_t cols, BFloat16* dst);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_LAYOUT_TRANSPOSE_H_
