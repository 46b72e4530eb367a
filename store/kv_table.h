// KvTable: the plain (single-threaded) key-value map with the Store semantics of Add and CompareSet,
// shared by MemoryStore, FileStore (its replayed cache) and the TCP store server.
#ifndef DDP_STORE_KV_TABLE_H_
#define DDP_STORE_KV_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ddp {

// A map from keys to byte values. Not thread-safe: callers hold their own lock.
class KvTable {
 public:
  // Result of CompareSet: the value after the call and whether `desired` was written.
  struct CompareSetResult {
    std::string value;
    bool swapped = false;
  };

  // Sets `key` to `value`.
  void Set(absl::string_view key, absl::string_view value);

  // Returns a pointer to the value of `key`, or nullptr when missing. The pointer is valid until the
  // next mutation of the table.
  const std::string* Find(absl::string_view key) const;

  // Store::Add semantics: adds `delta` to the decimal value at `key` (missing = 0), returns the sum.
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta);

  // Store::CompareSet semantics (see store/store.h).
  CompareSetResult CompareSet(absl::string_view key, absl::string_view expected,
                              absl::string_view desired);

  // Removes `key`; returns true when it existed.
  bool Delete(absl::string_view key);

  // Returns the keys of `keys` that are not in the table, in order.
  std::vector<std::string> Missing(absl::Span<const std::string> keys) const;

  // Number of keys.
  int64_t size() const { return static_cast<int64_t>(map_.size()); }

 private:
  absl::flat_hash_map<std::string, std::string> map_;
};

// Computes the result of Store::Add on a current value (`current` may be null: missing key).
// Pure; used by KvTable and by stores that must compute before they write.
absl::StatusOr<int64_t> AddToStoredInteger(absl::string_view key, const std::string* current,
                                           int64_t delta);

}  // namespace ddp

#endif  // DDP_STORE_KV_TABLE_H_
