#include "store/memory_store.h"

#include <vector>

namespace ddp {

absl::Status MemoryStore::Set(absl::string_view key, absl::string_view value) {
  absl::MutexLock lock(&mu_);
  table_.Set(key, value);
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::Status MemoryStore::WaitLocked(absl::string_view op, absl::Span<const std::string> keys,
                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::string> missing = table_.Missing(keys);
  while (!missing.empty()) {
    // WaitWithDeadline returns true on timeout; check the keys once more before giving up.
    const bool timed_out = changed_.WaitWithDeadline(&mu_, deadline);
    missing = table_.Missing(missing);
    if (timed_out && !missing.empty()) return StoreTimeoutError(op, missing, timeout);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MemoryStore::Get(absl::string_view key, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const std::string keys[] = {std::string(key)};
  absl::Status status = WaitLocked("Get", keys, timeout);
  if (!status.ok()) return status;
  return *table_.Find(key);
}

absl::StatusOr<int64_t> MemoryStore::Add(absl::string_view key, int64_t delta) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<int64_t> sum = table_.Add(key, delta);
  if (sum.ok()) changed_.SignalAll();
  return sum;
}

absl::StatusOr<std::string> MemoryStore::CompareSet(absl::string_view key,
                                                    absl::string_view expected,
                                                    absl::string_view desired) {
  absl::MutexLock lock(&mu_);
  KvTable::CompareSetResult result = table_.CompareSet(key, expected, desired);
  if (result.swapped) changed_.SignalAll();
  return std::move(result.value);
}

absl::StatusOr<bool> MemoryStore::DeleteKey(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  return table_.Delete(key);
}

absl::Status MemoryStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return WaitLocked("Wait", keys, timeout);
}

absl::StatusOr<int64_t> MemoryStore::NumKeys() {
  absl::MutexLock lock(&mu_);
  return table_.size();
}

}  // namespace ddp
