// Array conversions between float32 and IEEE float16 on the CPU, for the float16 copies that run on every
// step (the fp16 comm hook's compression, float16 reductions): the bits of the functors
// RoundToHalf / HalfToFloat32 (tensor/low_precision_round.h) element for element, NaN included, eight at a
// time with F16C where the build has it (x86-64-v3, this project's baseline) and through the functors
// otherwise. The hardware conversions alone would differ only on NaN payloads, which are patched to the
// functors' bits.
#ifndef DDP_TENSOR_HALF_CONVERT_H_
#define DDP_TENSOR_HALF_CONVERT_H_

#include <cstdint>

namespace ddp {
namespace cpu {

// dst[i] = RoundToHalf(src[i]) for i < n, on the calling thread. REQUIRES: the ranges do not overlap.
void FloatToHalfRun(const float* src, uint16_t* dst, int64_t n);

// dst[i] = HalfToFloat32(src[i]) for i < n (exact), on the calling thread. REQUIRES: the ranges do not
// overlap.
void HalfToFloatRun(const uint16_t* src, float* dst, int64_t n);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_HALF_CONVERT_H_
