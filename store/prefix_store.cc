#include "store/prefix_store.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ddp {

PrefixStore::PrefixStore(std::string prefix, Store* base)
    : prefix_(std::move(prefix)), base_(base) {
  DDP_CHECK(base_ != nullptr) << "PrefixStore needs a base store";
}

std::string PrefixStore::Prefixed(absl::string_view key) const {
  return absl::StrCat(prefix_, "/", key);
}

absl::Status PrefixStore::Set(absl::string_view key, absl::string_view value) {
  return base_->Set(Prefixed(key), value);
}

absl::StatusOr<std::string> PrefixStore::Get(absl::string_view key, absl::Duration timeout) {
  return base_->Get(Prefixed(key), timeout);
}

absl::StatusOr<int64_t> PrefixStore::Add(absl::string_view key, int64_t delta) {
  return base_->Add(Prefixed(key), delta);
}

absl::StatusOr<std::string> PrefixStore::CompareSet(absl::string_view key,
                                                    absl::string_view expected,
                                                    absl::string_view desired) {
  return base_->CompareSet(Prefixed(key), expected, desired);
}

absl::StatusOr<bool> PrefixStore::DeleteKey(absl::string_view key) {
  return base_->DeleteKey(Prefixed(key));
}

absl::Status PrefixStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const std::string& key : keys) prefixed.push_back(Prefixed(key));
  return base_->Wait(prefixed, timeout);
}

absl::StatusOr<int64_t> PrefixStore::NumKeys() { return base_->NumKeys(); }

}  // namespace ddp
