// ClaimRank: the first thing a rank does at rendezvous, so that a process of another job that reaches
// this job's store (a second job started by hand on the same MASTER_PORT) fails at once, naming the
// port, instead of taking a place in this job. Note [Rank claims] in store/rank_claim.cc.
#ifndef DDP_STORE_RANK_CLAIM_H_
#define DDP_STORE_RANK_CLAIM_H_

#include <string>

#include "absl/status/status.h"
#include "store/store.h"

namespace ddp {

// Who claims a place, and where, for the errors.
struct RankClaim {
  // The rank claimed. REQUIRES: >= 0.
  int rank = 0;
  // The job this process belongs to (LaunchEnv::job_id, DDP_JOB_ID; "" for ranks started by hand).
  std::string job_id;
  // The store as the user named it, e.g. "127.0.0.1:29500 (MASTER_ADDR:MASTER_PORT)".
  std::string store_description;
};

// Claims `claim.rank` in the job whose rendezvous namespace is `store`, at the cost of two store round
// trips. The first rank to arrive records the job id and every later one compares; a rank of another
// job gets kFailedPrecondition naming both ids and the store. Then the rank's place is claimed for this
// process: when another process holds it, kFailedPrecondition naming the rank, the holder (pid and
// host) and the store, and saying that another job uses the port. The same process claiming again (a
// retried rendezvous) succeeds. Store errors are returned as they are. Thread-safe as `store`.
absl::Status ClaimRank(Store& store, const RankClaim& claim);

}  // namespace ddp

#endif  // DDP_STORE_RANK_CLAIM_H_
