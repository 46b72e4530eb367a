// Rendezvous checks that a process group's Create makes around its backend's own rendezvous: ranks
// started with different world sizes, and ranks that never joined. See Note [Rendezvous checks].
#ifndef DDP_COMM_RENDEZVOUS_CHECKS_H_
#define DDP_COMM_RENDEZVOUS_CHECKS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "store/store.h"

namespace ddp {

// Checks that the ranks rendezvousing through `store` (the group's namespace) agree on the world size,
// at the cost of one store round trip: the first rank to arrive records "<size> (rank <rank>)" and every
// later one compares. On a disagreement returns kFailedPrecondition naming both values and both ranks,
// e.g. "rank 1 was started with WORLD_SIZE=3 but rank 0 with WORLD_SIZE=2 (every rank of a group needs
// the same world size)", and records this rank's size so that the ranks left waiting can name it
// (DescribeNeverJoined). Store errors are returned as they are. Thread-safe as `store`.
// REQUIRES: 0 <= rank < size.
absl::Status CheckSameWorldSize(Store& store, int rank, int size);

// For a rendezvous that failed on rank `rank` of `size`: the ranks other than `rank` for which
// `presence_key(r)` (a key every rank writes when it joins) is absent from `store` now, read without
// waiting, e.g. {1, 3}. Ranks whose key cannot be read (store errors) are left out.
std::vector<int> RanksNotJoined(Store& store, int rank, int size,
                                const std::function<std::string(int)>& presence_key);

// "rank 1 never joined" or "ranks 1, 3 never joined", with the world size a rank was started with when
// it refused to join over a disagreement (CheckSameWorldSize): "rank 1 never joined (it was started with
// WORLD_SIZE=3)". "" when `missing` is empty. Reads `store` without waiting.
std::string DescribeNeverJoined(Store& store, const std::vector<int>& missing);

}  // namespace ddp

#endif  // DDP_COMM_RENDEZVOUS_CHECKS_H_
