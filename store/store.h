// Start here for rendezvous: the key-value Store that ranks use to find each other.
//
// A Store maps string keys to byte-string values and is shared by every rank of a job. Three
// implementations exist, all behind this interface:
//   * MemoryStore  (store/memory_store.h): ranks as threads of one process share one instance.
//   * FileStore    (store/file_store.h):   `file:///path` on a filesystem all processes see.
//   * TcpStore     (store/tcp_store.h):    a server (in rank 0 or in ddprun) and TCP clients.
// PrefixStore (store/prefix_store.h) gives one user its own key namespace inside a shared store, and
// GlooStoreAdapter (comm/gloo/gloo_store_adapter.h) lets Gloo rendezvous through any of them.
//
// Semantics follow PyTorch's c10d::Store. Every call that can block takes an absl::Duration timeout
// and fails with absl::StatusCode::kDeadlineExceeded whose message names the keys still missing; no
// call blocks forever unless it is given absl::InfiniteDuration().
#ifndef DDP_STORE_STORE_H_
#define DDP_STORE_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace ddp {

// Timeout used by helpers that do not take one explicitly (PyTorch's default store timeout is 300 s).
inline constexpr absl::Duration kDefaultStoreTimeout = absl::Seconds(300);

// The rendezvous key-value store interface.
//
// Thread safety: every implementation is safe to call from several threads at once.
// Values are arbitrary bytes (std::string used as a byte buffer); keys are arbitrary bytes too.
class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any previous value, and wakes every Get/Wait blocked on `key`.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // Returns the value of `key`, blocking until the key exists or `timeout` has passed
  // (kDeadlineExceeded naming the key).
  virtual absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) = 0;

  // Adds `delta` to the integer stored at `key` (a missing key counts as 0) and returns the new value.
  // The value is stored as decimal text, so Get(key) returns e.g. "3". Fails with kInvalidArgument
  // when the current value is not a decimal int64, kOutOfRange on overflow.
  virtual absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;

  // Atomically sets `key` to `desired` if its current value equals `expected`, or if the key is missing
  // and `expected` is empty. Returns the value after the call: `desired` when it was swapped, the
  // current value when the key exists with another value, and `expected` when the key is missing and
  // `expected` is not empty (PyTorch's compareSet semantics).
  virtual absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                                 absl::string_view desired) = 0;

  // Removes `key`; returns true when it existed.
  virtual absl::StatusOr<bool> DeleteKey(absl::string_view key) = 0;

  // Blocks until every key in `keys` exists, or fails with kDeadlineExceeded after `timeout`,
  // naming the keys still missing.
  virtual absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) = 0;

  // Returns the number of keys in the store (for a PrefixStore: in the whole underlying store).
  virtual absl::StatusOr<int64_t> NumKeys() = 0;
};

// Returns the kDeadlineExceeded status every store uses when `op` (e.g. "Get", "Wait") gave up after
// `timeout` with `missing_keys` still absent. Keys are C-escaped so binary keys print readably.
absl::Status StoreTimeoutError(absl::string_view op, absl::Span<const std::string> missing_keys,
                               absl::Duration timeout);

}  // namespace ddp

#endif  // DDP_STORE_STORE_H_
