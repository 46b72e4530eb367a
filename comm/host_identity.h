// Host identity: whether every rank of a group runs on one host, for --backend=auto (shm on one host,
// gloo otherwise). Decided through the store from what each rank sees, never from LOCAL_WORLD_SIZE.
#ifndef DDP_COMM_HOST_IDENTITY_H_
#define DDP_COMM_HOST_IDENTITY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "store/store.h"

namespace ddp {

// This machine's identity: "<hostname> <boot id>" (boot id from /proc/sys/kernel/random/boot_id, which
// differs between machines and between boots, and is shared by containers of one kernel). Thread-safe.
std::string LocalHostIdentity();

// True when every identity equals the first (an empty list counts as one host). Pure.
bool AllOnOneHost(const std::vector<std::string>& identities);

// Publishes `identity` as rank `rank`'s under "host_identity/<rank>" in `store` and reads every rank's
// (each wait bounded by `timeout`); returns them in rank order. Thread-safe as `store`.
// REQUIRES: 0 <= rank < size.
absl::StatusOr<std::vector<std::string>> ExchangeHostIdentities(Store& store, int rank, int size,
                                                                const std::string& identity,
                                                                absl::Duration timeout);

}  // namespace ddp

#endif  // DDP_COMM_HOST_IDENTITY_H_
