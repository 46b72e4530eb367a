// ddprun --elastic: a lost worker does not stop the others. The survivors of a job run with
// train/train --elastic regroup and continue (docs/elastic.md); ddprun records each loss in the store,
// so that their regroup counts the lost worker at once (store/store_keys.h: ElasticLostKey), and the job
// succeeds when the survivors finish.
#ifndef DDP_LAUNCH_ELASTIC_LAUNCH_H_
#define DDP_LAUNCH_ELASTIC_LAUNCH_H_

#include <map>
#include <string>

#include "absl/status/status.h"
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

}  // namespace ddp

#endif  // DDP_LAUNCH_ELASTIC_LAUNCH_H_
