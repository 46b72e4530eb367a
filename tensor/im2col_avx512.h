// im2col with AVX-512 permutes and masked loads and stores (Note [im2col with AVX-512] in
// tensor/im2col_avx512.cc), for the geometries and CPUs it covers; tensor/im2col.cc runs its portable
// loops for the rest. Internal to the tensor floor.
#ifndef DDP_TENSOR_IM2COL_AVX512_H_
#define DDP_TENSOR_IM2COL_AVX512_H_

#include <cstdint>

#include "tensor/conv_kernels.h"
#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

// Unfolds images [first, first + count) of x into col as Im2ColGroup does (tensor/im2col.h), the same
// values, and returns true; returns false, having written nothing, when this CPU lacks AVX-512 (F and BW),
// DDP_IM2COL_AVX512=0 is set, or the geometry is one the note leaves to the portable loops. Thread-safe.
bool Im2ColGroupAvx512(const float* x, const ConvGeometry& g, int64_t first, int64_t count, float* col);
bool Im2ColGroupAvx512(const BFloat16* x, const ConvGeometry& g, int64_t first, int64_t count, BFloat16* col);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_IM2COL_AVX512_H_
