// --elastic: train/train's run that survives a lost rank without a restart (docs/elastic.md). When the
// group fails, the survivors agree on the next generation (comm/elastic_membership.h), build its group,
// take the state of the member that completed the most steps (train/elastic_state.h), rebuild DDP and
// the data loader at the new world size, and continue. Note [Elastic step boundary] in elastic_loop.cc
// says why that state is whole. A replacement that ddprun started for a lost worker joins at a step
// boundary (RunElasticJoiner; Note [Elastic join] in comm/elastic_membership.cc) and the group grows back.
#ifndef DDP_TRAIN_ELASTIC_LOOP_H_
#define DDP_TRAIN_ELASTIC_LOOP_H_

#include <functional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/init.h"
#include "ddp/distributed_eval.h"
#include "store/launch_env.h"
#include "train/train_step.h"

namespace ddp {

// What the trainer lends the elastic loop: how to run, and how to drop and rebuild what uses the group.
struct ElasticHooks {
  // Trains from `first_epoch` (state.resume_from says where inside it) to the end, with the end-of-run
  // artefacts; returns the final evaluation.
  std::function<absl::StatusOr<EvalResult>(int first_epoch)> run;
  // Drops every object that uses the group (DDP, the data loader); the group is destroyed next.
  std::function<void()> detach;
  // Rebuilds them over state.group as rank state.rank of state.world_size, with DDP's buckets in
  // `bucket_order` (Reducer::RebuiltOrderText; "" for the initial order), and recomputes
  // state.total_steps for that world size as a restart at it would.
  std::function<absl::Status(const std::string& bucket_order)> attach;
};

// The elastic settings ddprun --elastic passes in the environment (launch/elastic_launch.h).
struct ElasticSettings {
  int min_world_size = 1;  // DDP_ELASTIC_MIN_WORLD_SIZE: below it the job stops with a checkpoint
  int max_regroups = 16;   // DDP_ELASTIC_MAX_REGROUPS: regroups one process takes part in before it gives up
  absl::Duration arrival_timeout = absl::Seconds(30);  // DDP_ELASTIC_ARRIVAL_TIMEOUT_S (comm/elastic_membership.h)
  absl::Duration join_timeout = absl::Seconds(300);    // DDP_ELASTIC_JOIN_TIMEOUT_S: how long a replacement
                                                       // waits to be admitted
  // How often a member looks in the store for a waiting replacement (at most once per step).
  absl::Duration joiner_poll_interval = absl::Milliseconds(100);
};

// The settings from `env`; an error names a malformed or out-of-range variable.
absl::StatusOr<ElasticSettings> ElasticSettingsFromEnv(const EnvLookup& env);

// Whether a failed run may be recovered by regrouping: a collective that failed because a peer was
// lost, or timed out (kUnavailable, kDeadlineExceeded, kAborted). Other errors (bad input, mismatched
// ranks, a SIGTERM stop, a non-finite loss) end the run as without --elastic. Pure.
bool IsRecoverableByRegroup(const absl::Status& status);

// Runs hooks.run and, while it fails recoverably, regroups and runs again from the agreed state.
// `dist` holds the job's store and the current group (replaced at each regroup); `state` is the
// trainer's (group, rank, world_size, ddp are updated). REQUIRES: dist.group's backend is gloo or shm,
// the launcher hosts the store (DDP_STORE_IN_LAUNCHER=1, as under ddprun).
absl::StatusOr<EvalResult> RunElastic(const TrainConfig& config, DistributedContext& dist, TrainState& state,
                                      int first_epoch, const ElasticHooks& hooks);

// Whether this process was started by ddprun's elastic mode as a replacement for a lost worker
// (DDP_ELASTIC_JOIN=1): it must not join the group as InitProcessGroup would, but RunElasticJoiner.
bool IsElasticReplacement(const EnvLookup& env);

// The replacement's side: registers launch member DDP_ELASTIC_MEMBER in `dist`'s store (a context from
// ConnectWithoutGroup: no group yet), waits (DDP_ELASTIC_JOIN_TIMEOUT_S) for a generation that admits
// it, joins that generation's group, receives the training state (parameters, buffers, optimizer state,
// step and sampler position) from a member that holds it, attaches DDP and the loader, and then trains
// as RunElastic does. `state` holds the model and optimizer (their values are replaced), no group and no
// DDP. Errors: the wait's (naming the member and the key it waited for), a malformed DDP_ELASTIC_MEMBER,
// a backend other than gloo or shm, and those of RunElastic.
absl::StatusOr<EvalResult> RunElasticJoiner(const TrainConfig& config, DistributedContext& dist, TrainState& state,
                                            const ElasticHooks& hooks);

}  // namespace ddp

#endif  // DDP_TRAIN_ELASTIC_LOOP_H_
