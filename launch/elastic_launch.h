// ddprun --elastic: a lost worker does not stop the others. The survivors of a job run with
// train/train --elastic regroup and continue (docs/elastic.md); ddprun records each loss in the store,
// so that their regroup counts the lost worker at once (store/store_keys.h: ElasticLostKey), and the job
// succeeds when the survivors finish. With --max_restarts, a lost worker's slot gets a new process (a
// replacement, with a new member id) that joins the running job at a step boundary (docs/elastic.md).
#ifndef DDP_LAUNCH_ELASTIC_LAUNCH_H_
#define DDP_LAUNCH_ELASTIC_LAUNCH_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "launch/worker_env.h"

namespace ddp {

// What ddprun's elastic flags say.
struct ElasticLaunchOptions {
  // --elastic: keep the other workers running when one exits with an error or a signal.
  bool enabled = false;
  // --min_world_size: the fewest ranks the job may continue with (the workers read it as
  // DDP_ELASTIC_MIN_WORLD_SIZE); below it the survivors stop with a checkpoint. torchrun's
  // --nnodes=MIN:MAX bounds count nodes: MIN nodes of nproc_per_node workers map to
  // min_world_size = MIN * nproc_per_node.
  int min_world_size = 1;
};

// Checks that min_world_size is in [1, world_size] and is only given with `enabled`.
absl::Status ValidateElasticLaunchOptions(const ElasticLaunchOptions& options, int world_size);

// The variables every worker of an elastic job gets beside WorkerEnvironment's: DDP_ELASTIC=1 and
// DDP_ELASTIC_MIN_WORLD_SIZE. Empty when not enabled.
std::map<std::string, std::string> ElasticWorkerVariables(const ElasticLaunchOptions& options);

// Records in the store namespace of attempt `restart` of `layout`'s job that the worker started as RANK
// `rank` exited (ElasticLostKey). Best effort, bounded by 2 s connect and I/O timeouts: an unrecorded
// loss only makes the survivors' regroup wait for its arrival timeout.
void RecordElasticLoss(const JobLayout& layout, int restart, int rank);

// Replacements. The store calls below are bounded by 2 s connect and I/O timeouts.

// Whether a worker of attempt `restart` ended the elastic job (store/store_keys.h: ElasticClosedKey): one
// finished, or the survivors gave up. True as well when the store cannot be reached (no replacement then).
bool ElasticJobClosed(const JobLayout& layout, int restart);
// Marks the job as ending: a worker exited 0. Best effort.
void CloseElasticJob(const JobLayout& layout, int restart);

// A new member id for a replacement in attempt `restart`: layout's world size + n - 1 for the job's n-th
// replacement (ElasticReplacementsKey), unique across nodes. Errors: the store's.
absl::StatusOr<int> AllocateReplacementMember(const JobLayout& layout, int restart);

// The variables a replacement gets beside its slot's: DDP_ELASTIC_JOIN=1 and DDP_ELASTIC_MEMBER=`member`.
std::map<std::string, std::string> ReplacementVariables(int member);

// Whether a lost worker may be replaced now: budget left (replacements_left > 0), and enough workers
// still running (`alive`, this node's) for the job to continue at least at min_world_size. Pure.
bool MayReplace(const ElasticLaunchOptions& options, int replacements_left, int alive);

}  // namespace ddp

#endif  // DDP_LAUNCH_ELASTIC_LAUNCH_H_
