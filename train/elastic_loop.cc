#include "train/elastic_loop.h"

#include <dirent.h>

#include <cstdio>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "comm/elastic_membership.h"
#include "comm/generation_store.h"
#include "train/elastic_state.h"

namespace ddp {

// Note [Elastic step boundary]
// A step's state is applied whole or not at all on each rank: the optimizer runs only after every
// all-reduce of the step completed on this rank (Reducer::Finalize waits for them and the step stops at
// the first error), and global_step and the sampler position (TrainState::position) advance together
// with it. So each survivor holds the exact state after the last step it completed, s_i, and a lost rank
// can leave the survivors at most one step apart: a ring all-reduce may complete on one rank (which then
// steps) and fail on another. The survivors report s_i when they regroup (comm/elastic_membership.h), and
// the group continues from max_i s_i, taken from the lowest new rank that completed it (broadcast to
// every member, so the others, whatever they held, continue from identical bits). Rolling forward is
// right: a rank that completed step s saw the all-reduce of every rank's gradient of step s, the lost
// rank's included, so step s really happened; rolling back would need a copy of the state before every
// step. The sampler position travels with the state, so the next step draws the samples after the last
// completed step, re-divided among the new world size (Note [Resumable sampling] in data/sampler.cc)
// exactly as a restart from a checkpoint of that step at that world size would.
//
// The gradient average follows the new world size: DDP is rebuilt over the new group and divides by
// its size, so each step's update is the mean over the samples the live ranks trained on, as in a run
// started at that size; the learning rate is not rescaled (a restart from a checkpoint would not rescale
// it either), and the schedule's length (state.total_steps) is recomputed as such a restart computes it.

namespace {

// Generations per ddprun restart in the sample log's "attempt" field: attempt = restart * this +
// generation, so that EffectiveSteps lets a later generation's entries replace an earlier one's.
constexpr int kGenerationsPerAttempt = 1000;

void Say(const std::string& text) { std::fprintf(stderr, "elastic: %s\n", text.c_str()); }

absl::StatusOr<int64_t> IntegerVariable(const EnvLookup& env, const std::string& name, int64_t fallback, int64_t low) {
  const std::optional<std::string> text = env(name);
  if (!text.has_value() || text->empty()) return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(*text, &value) || value < low) {
    return absl::InvalidArgumentError(absl::StrCat(name, "=\"", *text, "\": expected an integer >= ", low));
  }
  return value;
}

// Entries of the directory `path` other than . and .. (-1 when it cannot be read).
int CountEntries(const char* path) {
  DIR* dir = opendir(path);
  if (dir == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // the descriptor of `dir` itself, under /proc/self/fd; a thread never is
}

// "7 threads, 23 open files" of this process: what a generation holds once formed, so that a leak across
// generations shows (the counts never grow as the group shrinks).
std::string ProcessResources() {
  return absl::StrCat(CountEntries("/proc/self/task") + 1, " threads, ", CountEntries("/proc/self/fd"), " open files");
}

// Drops every gradient: they may be views into buckets of the group being destroyed, and the next step
// zeroes them anyway.
void ClearGradients(Module& model) {
  for (const Tensor& p : model.Parameters()) p.set_grad(Tensor());
}

// Builds generation `next`'s group over its own store namespace and gives every member the state of
// next.SourceRank(). On success dist.group is the new group and `state` says its rank and size.
absl::Status JoinGeneration(DistributedContext& dist, const std::string& backend, const Generation& next,
                            TrainState& state) {
  auto store = std::make_unique<GenerationStore>(GenerationStorePrefix(next.number), dist.store.get(), next.members);
  InitOptions init;
  init.backend = backend;
  const int rank = next.RankOf(state.member);
  const int size = static_cast<int>(next.members.size());
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group, MakeGroupOverStore(init, dist, backend, *store, rank, size));
  ElasticTrainingState carried{&state.model, &state.optimizer, state.global_step, state.position};
  DDP_RETURN_IF_ERROR(BroadcastElasticState(*group, next.SourceRank(), carried));
  state.global_step = carried.global_step;
  state.position = carried.position;
  state.rank = rank;
  state.world_size = size;
  dist.group_store = std::move(store);
  dist.group = std::move(group);
  state.group = dist.group.get();
  return absl::OkStatus();
}

// Agrees on the generation after `generation` and joins it; a failure while forming it (a member lost
// during the regroup itself) starts the next regroup. `regroups` counts them against the limit.
absl::Status Regroup(const ElasticSettings& settings, DistributedContext& dist, const std::string& backend,
                     Generation& generation, TrainState& state, int& regroups) {
  for (;;) {
    if (++regroups > settings.max_regroups) {
      return absl::ResourceExhaustedError(absl::StrCat("elastic: gave up after ", settings.max_regroups,
                                                       " regroups (DDP_ELASTIC_MAX_REGROUPS)"));
    }
    RegroupOptions options;
    options.arrival_timeout = settings.arrival_timeout;
    DDP_ASSIGN_OR_RETURN(generation, AgreeNextGeneration(*dist.store, generation, state.member, state.global_step, options));
    MaybeKillInRegroup(state.fault, state.member);
    absl::Status joined = ConfirmGeneration(*dist.store, generation, state.member, options);
    if (joined.ok()) joined = JoinGeneration(dist, backend, generation, state);
    if (joined.ok()) return absl::OkStatus();
    if (!IsRecoverableByRegroup(joined)) return joined;
    Say(absl::StrCat("launch rank ", state.member, ": forming ", generation.ToString(), " failed (", joined.ToString(),
                     "); regrouping again"));
    state.group = nullptr;
  }
}

// Below the minimum world size: rank 0 of the regrouped survivors writes the agreed state as a checkpoint
// (when the run has a --checkpoint_dir) and every survivor stops with the same error.
absl::Status StopBelowMinimum(const TrainConfig& config, const ElasticSettings& settings,
                              const Generation& generation, TrainState& state) {
  std::string where = "no --checkpoint_dir, so nothing was saved";
  if (!config.checkpoint_dir.empty()) {
    where = absl::StrCat("its checkpoint is in ", config.checkpoint_dir, " (continue with --resume)");
    if (state.rank == 0) {
      const Checkpoint checkpoint = CaptureCheckpoint(state.model, &state.optimizer, state.position, nullptr,
                                                      state.global_step, state.position.epoch);
      SaveCheckpointOptions options;
      options.keep_last = config.keep_checkpoints;
      options.replace_existing = false;  // a step-N already there is this run's own, of the same state
      const absl::Status saved = SaveCheckpoint(config.checkpoint_dir, checkpoint, options);
      if (!saved.ok() && !absl::IsAlreadyExists(saved)) return saved;
    }
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "elastic: only ", generation.members.size(), " rank(s) remain (", generation.ToString(),
      "), fewer than the minimum world size ", settings.min_world_size, " (DDP_ELASTIC_MIN_WORLD_SIZE): stopped at step ",
      state.global_step, "; ", where));
}

// What --elastic needs of the launch: backend gloo or shm, ddprun --elastic (DDP_ELASTIC=1), and a store
// that outlives every worker.
absl::Status CheckElasticLaunch(const DistributedContext& dist) {
  const std::string backend = dist.group->backend_name();
  if (backend != "gloo" && backend != "shm") {
    return absl::InvalidArgumentError(
        absl::StrCat("--elastic regroups over backend gloo or shm, not ", backend, " (pass --backend=gloo or shm)"));
  }
  if (ProcessEnv()("DDP_ELASTIC").value_or("") != "1") {
    return absl::InvalidArgumentError(
        "--elastic needs a launcher that keeps the survivors running when a worker dies: ddprun --elastic "
        "(which sets DDP_ELASTIC=1)");
  }
  if (!dist.launch.store_in_launcher) {
    return absl::InvalidArgumentError(
        "--elastic needs a store that outlives every worker: start the job with ddprun --elastic (which hosts "
        "it), not with a rank hosting it");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ElasticSettings> ElasticSettingsFromEnv(const EnvLookup& env) {
  ElasticSettings settings;
  DDP_ASSIGN_OR_RETURN(const int64_t min_world, IntegerVariable(env, "DDP_ELASTIC_MIN_WORLD_SIZE", 1, 1));
  DDP_ASSIGN_OR_RETURN(const int64_t max_regroups, IntegerVariable(env, "DDP_ELASTIC_MAX_REGROUPS", 16, 0));
  DDP_ASSIGN_OR_RETURN(const int64_t arrival_s, IntegerVariable(env, "DDP_ELASTIC_ARRIVAL_TIMEOUT_S", 30, 1));
  if (max_regroups >= kGenerationsPerAttempt) {
    return absl::InvalidArgumentError(
        absl::StrCat("DDP_ELASTIC_MAX_REGROUPS=", max_regroups, ": at most ", kGenerationsPerAttempt - 1));
  }
  settings.min_world_size = static_cast<int>(std::min<int64_t>(min_world, 1 << 20));
  settings.max_regroups = static_cast<int>(max_regroups);
  settings.arrival_timeout = absl::Seconds(arrival_s);
  return settings;
}

bool IsRecoverableByRegroup(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) || absl::IsAborted(status);
}

absl::StatusOr<EvalResult> RunElastic(const TrainConfig& config, DistributedContext& dist, TrainState& state,
                                      int first_epoch, const ElasticHooks& hooks) {
  DDP_ASSIGN_OR_RETURN(const ElasticSettings settings, ElasticSettingsFromEnv(ProcessEnv()));
  DDP_RETURN_IF_ERROR(CheckElasticLaunch(dist));
  const std::string backend = dist.group->backend_name();
  Generation generation = FirstGeneration(state.world_size);
  state.member = dist.launch.rank;
  const int attempt_base = dist.launch.restart_count * kGenerationsPerAttempt;
  state.attempt = attempt_base;
  int regroups = 0;
  int epoch = first_epoch;
  if (state.rank == 0) Say(absl::StrCat(generation.ToString(), ": rank 0 holds ", ProcessResources()));
  for (;;) {
    absl::StatusOr<EvalResult> result = hooks.run(epoch);
    if (result.ok() || !IsRecoverableByRegroup(result.status())) return result;
    if (state.zero != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "elastic: --zero keeps each rank's optimizer state only in that rank, so a lost rank's shard is gone: "
          "falling back to the last checkpoint (ddprun --max_restarts with --resume restarts from it); the failure was: ",
          result.status().ToString()));
    }
    const absl::Time noticed = absl::Now();
    Say(absl::StrCat("launch rank ", state.member, ": ", generation.ToString(), " failed at step ",
                     state.global_step, " (", result.status().message().substr(0, 300), "); regrouping"));
    for (;;) {  // until DDP and the loader stand over a generation's group
      hooks.detach();
      ClearGradients(state.model);
      state.ddp = nullptr;
      state.group = nullptr;
      dist.group.reset();  // its connections close and its shared-memory segments go
      DDP_RETURN_IF_ERROR(Regroup(settings, dist, backend, generation, state, regroups));
      state.attempt = attempt_base + static_cast<int>(generation.number);
      if (static_cast<int>(generation.members.size()) < settings.min_world_size) {
        return StopBelowMinimum(config, settings, generation, state);
      }
      const absl::Status attached = hooks.attach();  // DDP's wrap communicates: a member may be lost there too
      if (attached.ok()) break;
      if (!IsRecoverableByRegroup(attached)) return attached;
      Say(absl::StrCat("launch rank ", state.member, ": rebuilding DDP over ", generation.ToString(), " failed (",
                       attached.message().substr(0, 300), "); regrouping again"));
    }
    if (state.rank == 0) {
      Say(absl::StrFormat("%s formed: rank 0 of %d continues from step %d (epoch %d, %d samples of it consumed), "
                          "%.3f s after the failure was noticed",
                          generation.ToString(), state.world_size, state.global_step, state.position.epoch,
                          state.position.consumed, absl::ToDoubleSeconds(absl::Now() - noticed)));
      Say(absl::StrCat(generation.ToString(), ": rank 0 holds ", ProcessResources()));
    }
    epoch = static_cast<int>(state.position.epoch);
    state.resume_from = state.position;
  }
}

}  // namespace ddp
