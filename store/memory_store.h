// MemoryStore: an in-process Store for ranks that run as threads of one process (tests, Spawn).
#ifndef DDP_STORE_MEMORY_STORE_H_
#define DDP_STORE_MEMORY_STORE_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "store/kv_table.h"
#include "store/store.h"

namespace ddp {

// A Store kept in memory. Share one instance (by pointer) between the rank threads.
// Thread safety: all methods are thread-safe; blocked Get/Wait calls wake on every write.
class MemoryStore : public Store {
 public:
  MemoryStore() = default;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::StatusOr<int64_t> NumKeys() override;

 private:
  // Blocks until all `keys` exist or the deadline passes; `op` names the caller in the error.
  absl::Status WaitLocked(absl::string_view op, absl::Span<const std::string> keys,
                          absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  absl::CondVar changed_;  // Signalled (SignalAll) after every write that adds or replaces a key.
  KvTable table_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddp

#endif  // DDP_STORE_MEMORY_STORE_H_
