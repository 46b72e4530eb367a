#include "tensor/dtype.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ddp {

size_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kInt64: return 8;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
  }
  DDP_CHECK(false) << "unknown dtype";
  return 0;
}

std::string DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kInt64: return "int64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

std::string SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "F32";
    case DType::kInt64: return "I64";
    case DType::kFloat16: return "F16";
    case DType::kBFloat16: return "BF16";
  }
  return "unknown";
}

absl::StatusOr<DType> DTypeFromSafetensorsName(const std::string& name) {
  if (name == "F32") return DType::kFloat32;
  if (name == "I64") return DType::kInt64;
  if (name == "F16") return DType::kFloat16;
  if (name == "BF16") return DType::kBFloat16;
  return absl::InvalidArgumentError(absl::StrCat("unsupported safetensors dtype \"", name, "\""));
}

uint16_t FloatToHalf(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (abs < 0x38800000u) {  // subnormal or zero in half
    const uint32_t shift = 126 - (abs >> 23);
    if (shift > 24) return static_cast<uint16_t>(sign);
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      out = sign | ((112 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

uint16_t FloatToBFloat16(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float BFloat16ToFloat(uint16_t bits) {
  const uint32_t x = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

}  // namespace ddp
