// StoreServerState: what the TCP store server does with decoded requests, without any sockets:
// the key-value table plus the Get/Wait requests parked until their keys appear or time out.
#ifndef DDP_STORE_STORE_SERVER_STATE_H_
#define DDP_STORE_STORE_SERVER_STATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "store/kv_table.h"
#include "store/store_protocol.h"

namespace ddp {

// Request handling for the TCP store server. Connections are named by caller-chosen ids; each
// connection has at most one request in flight (the server reads the next one only after answering).
// Not thread-safe: the server's single event-loop thread owns it.
class StoreServerState {
 public:
  // A response that is ready for a connection whose request had been parked.
  struct Completion {
    int64_t connection = 0;
    StoreResponse response;
  };

  // Applies `request` (any op but kHello) from `connection`. Returns the response, or nullopt when a
  // kGet/kWait must wait for its keys: its response comes later from TakeCompletions().
  // REQUIRES: `connection` has no parked request.
  std::optional<StoreResponse> Handle(int64_t connection, const StoreRequest& request,
                                      absl::Time now);

  // Returns (and forgets) the parked requests that are now satisfied, or whose deadline is <= now
  // (those get kDeadlineExceeded naming the missing keys).
  std::vector<Completion> TakeCompletions(absl::Time now);

  // Forgets the parked request of a connection that went away (no-op if none).
  void Cancel(int64_t connection) { parked_.erase(connection); }

  // Earliest deadline of the parked requests (InfiniteFuture when none).
  absl::Time NextDeadline() const;

  size_t num_parked() const { return parked_.size(); }

 private:
  struct Parked {
    StoreOp op = StoreOp::kWait;
    std::vector<std::string> keys;
    absl::Duration timeout;
    absl::Time deadline;
  };

  // The response to a kGet/kWait whose keys all exist.
  StoreResponse Satisfied(const Parked& parked) const;

  KvTable table_;
  absl::flat_hash_map<int64_t, Parked> parked_;
  bool written_since_check_ = false;  // Some key was added or replaced since TakeCompletions.
};

}  // namespace ddp

#endif  // DDP_STORE_STORE_SERVER_STATE_H_
