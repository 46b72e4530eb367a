#include "tensor/dtype.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "tensor/low_precision_round.h"

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

// The conversions are the functors CUDA kernels run too (tensor/low_precision_round.h), so both devices
// round alike.
uint16_t FloatToHalf(float value) { return functors::RoundToHalf()(value); }

float HalfToFloat(uint16_t bits) { return functors::HalfToFloat32()(bits); }

uint16_t FloatToBFloat16(float value) { return functors::RoundToBFloat16()(value); }

float BFloat16ToFloat(uint16_t bits) { return functors::BFloat16ToFloat32()(bits); }

}  // namespace ddp
