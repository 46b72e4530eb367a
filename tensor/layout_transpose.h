// The channel-order transpose between the engine's NCHW activations and the NHWC layout that oneDNN's AMX
// convolutions run on (tensor/conv_onednn.cc, Note [NHWC reorders]).
#ifndef DDP_TENSOR_LAYOUT_TRANSPOSE_H_
#define DDP_TENSOR_LAYOUT_TRANSPOSE_H_

#include <cstdint>

namespace ddp {
namespace cpu {

// dst[i][q][r] = src[i][r][q] for i < batch, r < rows, q < cols: `batch` row-major [rows, cols] float32
// matrices transposed into [cols, rows]. NCHW -> NHWC is rows = C, cols = H*W; NHWC -> NCHW is rows =
// H*W, cols = C. src and dst must not overlap. Thread-safe.
void Transpose32(const float* src, int64_t batch, int64_t rows, int64_t cols, float* dst);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_LAYOUT_TRANSPOSE_H_
