// KvTable: the plain (single-threaded) key-value map with the Store semantics of Add and CompareSet,
// shared by MemoryStore, FileStore (its replayed cache) and the TCP store server.
#ifndef DDP_STORE_KV_TABLE_H_
#define DDP_STORE_KV_TABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ddp {

// A map from keys to byte values. Values are immutable shared buffers, so a server can send one
// without copying it (Share), and the table counts the bytes of every value it made that is still
// alive anywhere (live_value_bytes), which is what a memory cap must bound. Not thread-safe: callers
// hold their own lock, and release shared values under it (or on the table's one thread).
class KvTable {
 public:
  // A value, shared with whoever is still sending it.
  using Value = std::shared_ptr<const std::string>;

  // Result of CompareSet: the value after the call and whether `desired` was written.
  struct CompareSetResult {
    std::string value;
    bool swapped = false;
  };

  // Sets `key` to `value`.
  void Set(absl::string_view key, absl::string_view value) { SetOwned(key, std::string(value)); }
  // Sets `key` to `value`, taking the string (no copy of a large value).
  void SetOwned(absl::string_view key, std::string value);

  // Returns a pointer to the value of `key`, or nullptr when missing. The pointer is valid until the
  // next mutation of the table.
  const std::string* Find(absl::string_view key) const;
  // Returns the value of `key` itself (null when missing); it stays valid (and counted in
  // live_value_bytes) after the key is replaced or deleted, until the last copy is released.
  Value Share(absl::string_view key) const;
  // A value counted in live_value_bytes like the stored ones, but not stored.
  Value MakeValue(std::string bytes);

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
  // Bytes of the keys in the table.
  int64_t key_bytes() const { return key_bytes_; }
  // Bytes of every value this table made that is still alive: stored, or shared out and not yet
  // released.
  int64_t live_value_bytes() const { return *live_value_bytes_; }

 private:
  absl::flat_hash_map<std::string, Value> map_;
  int64_t key_bytes_ = 0;
  // Shared with each value's deleter, so a value released after the table is gone stays safe.
  std::shared_ptr<int64_t> live_value_bytes_ = std::make_shared<int64_t>(0);
};

// Computes the result of Store::Add on a current value (`current` may be null: missing key).
// Pure; used by KvTable and by stores that must compute before they write.
absl::StatusOr<int64_t> AddToStoredInteger(absl::string_view key, const std::string* current,
                                           int64_t delta);

}  // namespace ddp

#endif  // DDP_STORE_KV_TABLE_H_
