// Rounding between float32 and the two 16-bit float formats of mixed precision (tensor/autocast.h), as
// functors that are __host__ __device__ under nvcc: the CUDA kernels that round GEMM operands
// (tensor/cuda/low_precision.cu) run this code, and the CPU runs it too (tensor/autocast.cc), so the
// CPU tests (tensor/low_precision_round_test.cc) check bit for bit the rounding the GPU does. The values
// are those of FloatToBFloat16 / FloatToHalf (tensor/dtype.h) and of the vectorised CPU conversions
// (tensor/bf16_convert.h, F16C), element for element.
#ifndef DDP_TENSOR_LOW_PRECISION_ROUND_H_
#define DDP_TENSOR_LOW_PRECISION_ROUND_H_

#include <cstdint>
#include <cstring>

#include "tensor/functors.h"

namespace ddp {
namespace functors {

// The bits of a float32, and the float32 of bits.
DDP_HOST_DEVICE inline uint32_t FloatBits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
#endif
}
DDP_HOST_DEVICE inline float BitsToFloat(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
#endif
}

// float32 -> bfloat16 bits: to nearest, ties to even; a NaN stays NaN (quieted, payload's upper bits
// kept); inf stays inf; subnormals are rounded like any other value (no flush to zero); values that
// round past the largest bf16 become inf.
struct RoundToBFloat16 {
  DDP_HOST_DEVICE uint16_t operator()(float value) const {
    const uint32_t x = FloatBits(value);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
    return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  }
};

// float32 x -> bfloat16 bits of x * scale: the product in float32 (rounded to nearest), then
// RoundToBFloat16 once. A NaN x is rounded unscaled: x86's multiply returns a NaN operand (quieted)
// unchanged, while a GPU's returns the canonical NaN; the rounding keeps the payload's upper bits, so both
// devices give the bits the CPU's `x * scale` then RoundToBFloat16 gives, for a finite `scale`. The
// Reducer's bfloat16 bucket slots (Note [Reduce dtype rounding], reducer/bucket_cast.h).
struct RoundScaledToBFloat16 {
  float scale;
  DDP_HOST_DEVICE uint16_t operator()(float value) const {
    if ((FloatBits(value) & 0x7fffffffu) > 0x7f800000u) return RoundToBFloat16()(value);
#if defined(__CUDA_ARCH__)
    return RoundToBFloat16()(__fmul_rn(value, scale));  // a plain multiply, never contracted
#else
    return RoundToBFloat16()(value * scale);
#endif
  }
};

// bfloat16 bits -> float32 (exact).
struct BFloat16ToFloat32 {
  DDP_HOST_DEVICE float operator()(uint16_t bits) const { return BitsToFloat(static_cast<uint32_t>(bits) << 16); }
};

// float32 -> IEEE float16 bits: to nearest, ties to even, gradual underflow to float16 subnormals and
// zero; values that round beyond 65504 become inf; NaN stays a quiet NaN; the sign is kept (also of zero).
struct RoundToHalf {
  DDP_HOST_DEVICE uint16_t operator()(float value) const {
    const uint32_t x = FloatBits(value);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
    if (abs < 0x38800000u) {  // a float16 subnormal or zero
      const uint32_t shift = 126 - (abs >> 23);
      if (shift > 24) return static_cast<uint16_t>(sign);
      const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
      uint32_t half = mant >> shift;
      const uint32_t rem = mant & ((1u << shift) - 1);
      const uint32_t halfway = 1u << (shift - 1);
      if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
      return static_cast<uint16_t>(sign | half);
    }
    uint32_t half = (abs - 0x38000000u) >> 13;
    const uint32_t rem = abs & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
};

// IEEE float16 bits -> float32 (exact; NaN payloads kept).
struct HalfToFloat32 {
  DDP_HOST_DEVICE float operator()(uint16_t bits) const {
    const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1fu;
    const uint32_t mant = bits & 0x3ffu;
    if (exponent == 0) {  // zero or subnormal: mant * 2^-24, exact in float32
      const float magnitude = static_cast<float>(mant) * 5.9604644775390625e-8f;
      return BitsToFloat(FloatBits(magnitude) | sign);
    }
    if (exponent == 31) return BitsToFloat(sign | 0x7f800000u | (mant << 13));
    return BitsToFloat(sign | ((exponent + 112) << 23) | (mant << 13));
  }
};

}  // namespace functors
}  // namespace ddp

#endif  // DDP_TENSOR_LOW_PRECISION_ROUND_H_
