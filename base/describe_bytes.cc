#include "base/describe_bytes.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ddp {

std::string DescribeBytes(int64_t bytes) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  if (bytes < 64 * 1024) return absl::StrCat(bytes, " bytes");
  if (bytes < 1024 * kMiB) return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / kMiB);
  return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1024 * kMiB));
}

}  // namespace ddp
