#include "store/kv_table.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ddp {

absl::StatusOr<int64_t> AddToStoredInteger(absl::string_view key, const std::string* current,
                                           int64_t delta) {
  int64_t value = 0;
  if (current != nullptr && !absl::SimpleAtoi(*current, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("store Add: value of key '", absl::CHexEscape(key),
                                                   "' is not a decimal integer: '",
                                                   absl::CHexEscape(current->substr(0, 64)), "'"));
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum)) {
    return absl::OutOfRangeError(absl::StrCat("store Add: ", value, " + ", delta, " overflows int64",
                                              " for key '", absl::CHexEscape(key), "'"));
  }
  return sum;
}

KvTable::Value KvTable::MakeValue(std::string bytes) {
  *live_value_bytes_ += static_cast<int64_t>(bytes.size());
  return Value(new std::string(std::move(bytes)), [counter = live_value_bytes_](const std::string* value) {
    *counter -= static_cast<int64_t>(value->size());
    delete value;
  });
}

void KvTable::SetOwned(absl::string_view key, std::string value) {
  Value made = MakeValue(std::move(value));
  auto [it, inserted] = map_.try_emplace(key, nullptr);
  if (inserted) key_bytes_ += static_cast<int64_t>(key.size());
  it->second = std::move(made);
}

const std::string* KvTable::Find(absl::string_view key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : it->second.get();
}

KvTable::Value KvTable::Share(absl::string_view key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : it->second;
}

absl::StatusOr<int64_t> KvTable::Add(absl::string_view key, int64_t delta) {
  auto sum = AddToStoredInteger(key, Find(key), delta);
  if (sum.ok()) Set(key, absl::StrCat(*sum));
  return sum;
}

KvTable::CompareSetResult KvTable::CompareSet(absl::string_view key, absl::string_view expected,
                                              absl::string_view desired) {
  const std::string* current = Find(key);
  if ((current == nullptr && expected.empty()) || (current != nullptr && *current == expected)) {
    Set(key, desired);
    return {std::string(desired), true};
  }
  if (current == nullptr) return {std::string(expected), false};
  return {*current, false};
}

bool KvTable::Delete(absl::string_view key) {
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  key_bytes_ -= static_cast<int64_t>(it->first.size());
  map_.erase(it);
  return true;
}

std::vector<std::string> KvTable::Missing(absl::Span<const std::string> keys) const {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (Find(key) == nullptr) missing.push_back(key);
  }
  return missing;
}

}  // namespace ddp
