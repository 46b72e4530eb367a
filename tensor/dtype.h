// Element types a Tensor can hold.
#ifndef DDP_TENSOR_DTYPE_H_
#define DDP_TENSOR_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ddp {

// float32 and int64 are computed on; float16 and bfloat16 are storage types: gradient compression in
// communication hooks, and the operands of the GEMMs that mixed precision runs in bfloat16
// (tensor/autocast.h). Converted with ToDType.
enum class DType : uint8_t { kFloat32, kInt64, kFloat16, kBFloat16 };

// Bytes per element of `dtype`.
size_t ElementSize(DType dtype);

// "float32", "int64", "float16", "bfloat16".
std::string DTypeName(DType dtype);

// Safetensors' spelling: "F32", "I64", "F16", "BF16".
std::string SafetensorsDTypeName(DType dtype);

// Inverse of SafetensorsDTypeName; an error names the unknown string.
absl::StatusOr<DType> DTypeFromSafetensorsName(const std::string& name);

// Maps a C++ element type to its DType (float -> kFloat32, int64_t -> kInt64).
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kInt64;
};

// One bfloat16 value as stored (the upper 16 bits of a float32), so that Tensor::data<BFloat16>() is
// typed and cannot be confused with float16's bits.
struct BFloat16 {
  uint16_t bits;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::kBFloat16;
};

// IEEE half and bfloat16 conversions (round to nearest even), usable on host and device.
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);
float BFloat16ToFloat(uint16_t bits);

}  // namespace ddp

#endif  // DDP_TENSOR_DTYPE_H_
