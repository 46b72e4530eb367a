#include "comm/generation_store.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "store/store_keys.h"

namespace ddp {

GenerationStore::GenerationStore(std::string prefix, Store* base, std::vector<int> members)
    : PrefixStore(std::move(prefix), base), base_(base), members_(std::move(members)) {}

absl::StatusOr<std::string> GenerationStore::Get(absl::string_view key, absl::Duration timeout) {
  const std::string notice = LauncherExitNoticeKey(0);
  const absl::string_view notice_prefix(notice.data(), notice.size() - 1);  // "launcher/exit/"
  int rank = -1;
  if (absl::StartsWith(key, notice_prefix) && absl::SimpleAtoi(key.substr(notice_prefix.size()), &rank) && rank >= 0 &&
      rank < static_cast<int>(members_.size())) {
    return base_->Get(LauncherExitNoticeKey(members_[rank]), timeout);
  }
  return PrefixStore::Get(key, timeout);
}

}  // namespace ddp
