#include "ddp/mixed_precision.h"

#include "absl/strings/str_cat.h"
#include "reducer/bucket_cast.h"

namespace ddp {

absl::Status CheckDdpMixedPrecision(const DdpMixedPrecision& mixed_precision, const ReducerOptions& reducer) {
  const auto float32_only = [](const char* field, DType dtype) -> absl::Status {
    if (dtype == DType::kFloat32) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "DDP mixed_precision.", field, " = ", DTypeName(dtype),
        " is not supported: parameters and buffers stay float32 (master weights); for low-precision compute "
        "open an AutocastScope (tensor/autocast.h, --precision=bf16|fp16)"));
  };
  DDP_RETURN_IF_ERROR(float32_only("param_dtype", mixed_precision.param_dtype));
  DDP_RETURN_IF_ERROR(float32_only("buffer_dtype", mixed_precision.buffer_dtype));
  const DType reduce = mixed_precision.reduce_dtype;
  DDP_RETURN_IF_ERROR(CheckReduceDtype(reduce));
  if (reducer.reduce_dtype != DType::kFloat32 && reducer.reduce_dtype != reduce) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DDP: ReducerOptions::reduce_dtype is ", DTypeName(reducer.reduce_dtype), " but mixed_precision.reduce_dtype is ",
        DTypeName(reduce), "; set mixed_precision.reduce_dtype only"));
  }
  if (reduce == DType::kFloat32) return absl::OkStatus();
  const std::string what = absl::StrCat("DDP mixed_precision.reduce_dtype = ", DTypeName(reduce));
  if (reducer.gradient_as_bucket_view) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " cannot be combined with gradient_as_bucket_view: a float32 .grad cannot be a view of a ",
        DTypeName(reduce), " bucket"));
  }
  if (reducer.comm_hook != nullptr && !reducer.comm_hook->SupportsBucketDtype(reduce)) {
    const std::string name = reducer.comm_hook->name();
    return absl::InvalidArgumentError(absl::StrCat(
        what, " cannot be combined with the comm hook \"", name, "\", which takes float32 buckets",
        name == "bf16" || name == "fp16"
            ? absl::StrCat(": the buckets are ", DTypeName(reduce),
                           " already, and the hook would convert them a second time; use one of the two")
            : ""));
  }
  return absl::OkStatus();
}

}  // namespace ddp
