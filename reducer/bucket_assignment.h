// Which gradients share a communication bucket: a pure function of parameter sizes, dtypes, devices
// and caps, tested without processes or devices (PyTorch's compute_bucket_assignment_by_size).
//
// Note [Bucket assignment]
// Parameters are visited in `order` (by default reverse registration order, because backward produces
// the last layer's gradients first). Each (dtype, device) pair fills its own open bucket; a parameter is
// never split. A bucket closes as soon as its size reaches its cap: the first bucket of each
// (dtype, device) uses first_bucket_cap_bytes (small, so the first all-reduce starts early in backward),
// later ones bucket_cap_bytes. A cap of 0 therefore means one bucket per parameter. Closed buckets are
// finally ordered by the position (in `order`) of their first parameter, which is the order they fill
// during backward, so the Reducer can launch them strictly in index order.
#ifndef DDP_REDUCER_BUCKET_ASSIGNMENT_H_
#define DDP_REDUCER_BUCKET_ASSIGNMENT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensor/device.h"
#include "tensor/dtype.h"

namespace ddp {

// What bucket assignment needs to know about one parameter.
struct BucketParameter {
  int64_t numel = 0;
  DType dtype = DType::kFloat32;
  Device device;
};

// How large buckets grow (Note [Bucket assignment]). The defaults are PyTorch's and are written only here:
// ReducerOptions and DdpOptions hold a BucketCaps.
struct BucketCaps {
  size_t first_bucket_cap_bytes = size_t{1} << 20;  // 1 MiB: the first bucket closes, and launches, early
  size_t bucket_cap_bytes = size_t{25} << 20;       // 25 MiB; a cap of 0 means one bucket per parameter
};

// Returns the buckets as lists of parameter indices (into `params`), each list in visiting order, the
// lists in launch order (Note [Bucket assignment]). `order` is a permutation of 0..params.size()-1 giving
// the visiting order; empty means reverse registration order. Aborts if `order` is not a permutation.
std::vector<std::vector<size_t>> AssignBuckets(const std::vector<BucketParameter>& params,
                                               const BucketCaps& caps,
                                               const std::vector<size_t>& order = {});

// A gradient order as text, the form checkpoints keep: comma-separated parameter indices ("4,3,0").
std::string GradientOrderText(const std::vector<size_t>& order);

// Parses GradientOrderText's form into a visiting order for AssignBuckets over `num_params` parameters:
// the listed indices first, then the ones the text lacks (parameters that never became ready) in reverse
// registration order. "" gives reverse registration order. Errors (kDataLoss) quote the text when a
// token is not an index below num_params or repeats one.
absl::StatusOr<std::vector<size_t>> ParseGradientOrder(absl::string_view text, size_t num_params);

// A human-readable table of a bucket layout: one line per bucket with its index, parameter count,
// bytes and parameter names ("bucket 0: 2 params, 5.0 KiB: fc3.bias fc3.weight"). The bytes are those of
// the parameters' dtypes, or, when `bucket_dtype` is given (a reduce dtype other than the parameters'),
// those of the bucket in that dtype, which the line then names ("1.0 KiB bfloat16").
std::string DescribeBuckets(const std::vector<std::vector<size_t>>& buckets,
                            const std::vector<BucketParameter>& params, const std::vector<std::string>& names,
                            std::optional<DType> bucket_dtype = std::nullopt);

}  // namespace ddp

#endif  // DDP_REDUCER_BUCKET_ASSIGNMENT_H_
