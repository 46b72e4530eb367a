#include "reducer/bucket_assignment.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/check.h"

namespace ddp {
namespace {

using GroupKey = std::tuple<int, int, int>;  // dtype, device type, device index

GroupKey KeyOf(const BucketParameter& p) {
  return {static_cast<int>(p.dtype), static_cast<int>(p.device.type), p.device.index};
}

// The open bucket of one (dtype, device) group.
struct OpenBucket {
  std::vector<size_t> indices;
  size_t bytes = 0;
  bool first_closed = false;  // whether this group already closed its first bucket
};

std::vector<size_t> ResolveOrder(size_t n, const std::vector<size_t>& order) {
  if (order.empty()) {
    std::vector<size_t> reversed(n);
    std::iota(reversed.rbegin(), reversed.rend(), 0);
    return reversed;
  }
  DDP_CHECK(order.size() == n) << "bucket order has " << order.size() << " entries for " << n << " parameters";
  std::vector<bool> seen(n, false);
  for (size_t i : order) {
    DDP_CHECK(i < n && !seen[i]) << "bucket order is not a permutation (index " << i << ")";
    seen[i] = true;
  }
  return order;
}

}  // namespace

std::vector<std::vector<size_t>> AssignBuckets(const std::vector<BucketParameter>& params, const BucketCaps& caps,
                                               const std::vector<size_t>& order) {
  const std::vector<size_t> visit = ResolveOrder(params.size(), order);
  std::vector<size_t> position(params.size());
  for (size_t i = 0; i < visit.size(); ++i) position[visit[i]] = i;

  std::map<GroupKey, OpenBucket> open;
  std::vector<std::vector<size_t>> closed;
  for (size_t index : visit) {
    const BucketParameter& p = params[index];
    OpenBucket& bucket = open[KeyOf(p)];
    bucket.indices.push_back(index);
    bucket.bytes += static_cast<size_t>(p.numel) * ElementSize(p.dtype);
    const size_t cap = bucket.first_closed ? caps.bucket_cap_bytes : caps.first_bucket_cap_bytes;
    if (bucket.bytes >= cap) {
      closed.push_back(std::move(bucket.indices));
      bucket.indices.clear();
      bucket.bytes = 0;
      bucket.first_closed = true;
    }
  }
  for (auto& [key, bucket] : open) {
    if (!bucket.indices.empty()) closed.push_back(std::move(bucket.indices));
  }
  std::sort(closed.begin(), closed.end(), [&](const auto& a, const auto& b) {
    return position[a.front()] < position[b.front()];
  });
  return closed;
}

std::string GradientOrderText(const std::vector<size_t>& order) { return absl::StrJoin(order, ","); }

absl::StatusOr<std::vector<size_t>> ParseGradientOrder(absl::string_view text, size_t num_params) {
  std::vector<size_t> order;
  std::vector<bool> seen(num_params, false);
  for (absl::string_view token : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    size_t index = 0;
    if (!absl::SimpleAtoi(token, &index) || index >= num_params || seen[index]) {
      return absl::DataLossError(absl::StrCat("DDP bucket order \"", text, "\" is not a list of distinct ",
                                              "parameter indices below ", num_params));
    }
    seen[index] = true;
    order.push_back(index);
  }
  for (size_t i = num_params; i-- > 0;) {
    if (!seen[i]) order.push_back(i);
  }
  return order;
}

std::string DescribeBuckets(const std::vector<std::vector<size_t>>& buckets,
                            const std::vector<BucketParameter>& params, const std::vector<std::string>& names,
                            std::optional<DType> bucket_dtype) {
  std::string out;
  for (size_t b = 0; b < buckets.size(); ++b) {
    size_t bytes = 0;
    std::string list;
    for (size_t index : buckets[b]) {
      bytes += static_cast<size_t>(params[index].numel) * ElementSize(bucket_dtype.value_or(params[index].dtype));
      absl::StrAppend(&list, " ", index < names.size() ? names[index] : absl::StrCat("#", index));
    }
    const std::string dtype = bucket_dtype.has_value() ? absl::StrCat(" ", DTypeName(*bucket_dtype)) : "";
    absl::StrAppendFormat(&out, "bucket %d: %d params, %.1f KiB%s:%s\n", b, buckets[b].size(), bytes / 1024.0, dtype,
                          list);
  }
  return out;
}

}  // namespace ddp
