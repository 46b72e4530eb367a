#include "store/store.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ddp {

absl::Status StoreTimeoutError(absl::string_view op, absl::Span<const std::string> missing_keys,
                               absl::Duration timeout) {
  std::string keys = absl::StrJoin(missing_keys, ", ", [](std::string* out, const std::string& k) {
    absl::StrAppend(out, "'", absl::CHexEscape(k), "'");
  });
  return absl::DeadlineExceededError(absl::StrCat("store ", op, " timed out after ",
                                                  absl::FormatDuration(timeout),
                                                  " waiting for key(s) [", keys, "]"));
}

}  // namespace ddp
