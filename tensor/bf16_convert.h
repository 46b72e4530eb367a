// Array conversions between float32 and bfloat16 for mixed precision (tensor/autocast.h): the same
// rounding as FloatToBFloat16 (to nearest, ties to even; NaN stays a quiet NaN; subnormals kept), element
// for element, vectorised for the CPU they run on (AVX-512 where present, else AVX2).
#ifndef DDP_TENSOR_BF16_CONVERT_H_
#define DDP_TENSOR_BF16_CONVERT_H_

#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

// dst[i] = FloatToBFloat16(src[i]) for i < n. Large arrays are split over the kernel threads.
// REQUIRES: the ranges do not overlap.
void FloatToBFloat16Array(const float* src, BFloat16* dst, int64_t n);

// The same on the calling thread alone, for short runs inside a kernel's own parallel loop.
void FloatToBFloat16Run(const float* src, BFloat16* dst, int64_t n);

// FloatToBFloat16Run's rounding inlined into the caller: for a short row a kernel has just computed (in L1),
// rounded in a loop the compiler vectorises for the caller's target, without a call per row.
inline void FloatToBFloat16Inline(const float* src, BFloat16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t x;
    std::memcpy(&x, src + i, 4);
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (x >> 16) | 0x40u;
    const bool nan = (x & 0x7fffffffu) > 0x7f800000u;
    dst[i].bits = static_cast<uint16_t>(nan ? quiet_nan : rounded);
  }
}

// dst[i] = BFloat16ToFloat(src[i]) for i < n (exact). REQUIRES: the ranges do not overlap.
void BFloat16ToFloatArray(const BFloat16* src, float* dst, int64_t n);

// The same on the calling thread alone (no OpenMP region: safe and cheap on a communication thread, whose
// OpenMP settings are not the kernel threads').
void BFloat16ToFloatRun(const BFloat16* src, float* dst, int64_t n);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_BF16_CONVERT_H_
