// StoreServerState: what the TCP store server does with decoded requests, without any sockets:
// the key-value table plus the Get/Wait requests parked until their keys appear or time out, under a
// cap on the bytes it holds.
#ifndef DDP_STORE_STORE_SERVER_STATE_H_
#define DDP_STORE_STORE_SERVER_STATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "store/kv_table.h"
#include "store/store_protocol.h"

namespace ddp {

// Request handling for the TCP store server. Connections are named by caller-chosen ids; each
// connection has at most one request in flight (the server reads the next one only after answering).
// Memory: held_bytes() (keys, values alive, parked requests' keys) never passes `max_held_bytes`; a
// request that would pass it is answered kResourceExhausted naming the key, the sizes and the cap, and
// changes nothing. Not thread-safe: the server's single event-loop thread owns it (values shared out
// in replies must be released on that thread too).
class StoreServerState {
 public:
  // A response. When `value` is set it is the response's value (response.value stays empty): a stored
  // value shared, not copied, until it has been sent.
  struct Reply {
    StoreResponse response;
    KvTable::Value value;
  };
  // A reply that is ready for a connection whose request had been parked.
  struct Completion {
    int64_t connection = 0;
    Reply reply;
  };

  // REQUIRES: max_held_bytes > 0.
  explicit StoreServerState(int64_t max_held_bytes);

  // Applies `request` (any op but kHello) from `connection`. Returns the reply, or nullopt when a
  // kGet/kWait must wait for its keys: its reply comes later from TakeCompletions().
  // REQUIRES: `connection` has no parked request.
  std::optional<Reply> Handle(int64_t connection, StoreRequest request, absl::Time now);

  // Returns (and forgets) the parked requests that are now satisfied, or whose deadline is <= now
  // (those get kDeadlineExceeded naming the missing keys).
  std::vector<Completion> TakeCompletions(absl::Time now);

  // Forgets the parked request of a connection that went away (no-op if none).
  void Cancel(int64_t connection);

  // Earliest deadline of the parked requests (InfiniteFuture when none).
  absl::Time NextDeadline() const;

  size_t num_parked() const { return parked_.size(); }
  // Bytes held for clients: keys, every value alive (stored, or still being sent after it was
  // replaced), and the keys of parked requests.
  int64_t held_bytes() const { return table_.key_bytes() + table_.live_value_bytes() + parked_key_bytes_; }
  int64_t max_held_bytes() const { return max_held_bytes_; }

 private:
  struct Parked {
    StoreOp op = StoreOp::kWait;
    std::vector<std::string> keys;
    absl::Duration timeout;
    absl::Time deadline;
    int64_t key_bytes = 0;
  };

  // kResourceExhausted when holding `added` more bytes (writing `key` when not empty, which frees its
  // current value unless that is still being sent) would pass the cap; `what` names the request.
  absl::Status CheckRoom(absl::string_view what, absl::string_view key, int64_t added) const;
  std::optional<Reply> HandleCompareSet(StoreRequest& request);
  // The reply to a kGet/kWait whose keys all exist.
  Reply Satisfied(const Parked& parked) const;
  void Forget(absl::flat_hash_map<int64_t, Parked>::iterator it);

  const int64_t max_held_bytes_;
  KvTable table_;
  absl::flat_hash_map<int64_t, Parked> parked_;
  int64_t parked_key_bytes_ = 0;
  bool written_since_check_ = false;  // Some key was added or replaced since TakeCompletions.
};

}  // namespace ddp

#endif  // DDP_STORE_STORE_SERVER_STATE_H_
