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
#include "train/settings_agreement.h"
#include "store/store_keys.h"
#include "absl/strings/str_join.h"

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

// Where an elastic run stands between regroups.
struct ElasticRun {
  ElasticSettings settings;
  std::string backend;            // "gloo" or "shm": every generation's group uses it
  Generation generation;          // the current (or last decided) generation
  int first_replacement = 0;      // the job's initial world size: replacements' member ids start there
  int attempt_base = 0;           // the sample log's attempt of generation 0
  int regroups = 0;               // regroups so far, against settings.max_regroups
  bool holds_state = true;        // false for a replacement until its first generation formed
  std::string bucket_order;       // the last DDP's rebuilt bucket order, which the next one restores
  int64_t report_after_step = -1;  // >= 0: rank 0 reports when the first step after it completes
  absl::Time last_joiner_poll = absl::InfinitePast();
};

// Builds generation run.generation's group over its own store namespace and gives every member the state
// of its SourceRank(). On success dist.group is the new group and `state` says its rank and size. With
// joiners, the ranks also check that they run with the same settings (a joiner was started apart).
absl::Status JoinGeneration(const TrainConfig& config, DistributedContext& dist, ElasticRun& run, TrainState& state) {
  const Generation& next = run.generation;
  auto store = std::make_unique<GenerationStore>(GenerationStorePrefix(next.number), dist.store.get(), next.members);
  InitOptions init;
  init.backend = run.backend;
  const int rank = next.RankOf(state.member);
  const int size = static_cast<int>(next.members.size());
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group,
                       MakeGroupOverStore(init, dist, run.backend, *store, rank, size));
  if (!next.Joiners().empty()) DDP_RETURN_IF_ERROR(CheckSettingsAgree(*group, config));
  ElasticTrainingState carried{&state.model, &state.optimizer, state.global_step, state.position, run.bucket_order};
  DDP_RETURN_IF_ERROR(BroadcastElasticState(*group, next.SourceRank(), carried));
  state.global_step = carried.global_step;
  state.position = carried.position;
  run.bucket_order = carried.bucket_order;
  state.rank = rank;
  state.world_size = size;
  dist.group_store = std::move(store);
  dist.group = std::move(group);
  state.group = dist.group.get();
  run.holds_state = true;
  return absl::OkStatus();
}

// The decided generation run.generation forms: every member confirms, then joins its group.
absl::Status FormGeneration(const TrainConfig& config, DistributedContext& dist, ElasticRun& run, TrainState& state,
                            const RegroupOptions& options) {
  DDP_RETURN_IF_ERROR(ConfirmGeneration(*dist.store, run.generation, state.member, options));
  return JoinGeneration(config, dist, run, state);
}

RegroupOptions RegroupOptionsOf(const ElasticSettings& settings) {
  RegroupOptions options;
  options.arrival_timeout = settings.arrival_timeout;
  return options;
}

// Agrees on the generation after run.generation, with `joiners` (replacements waiting) added, and joins
// it; a failure while forming it (a member lost during the regroup itself) starts the next regroup.
absl::Status Regroup(const TrainConfig& config, DistributedContext& dist, ElasticRun& run, TrainState& state,
                     std::vector<int> joiners) {
  const RegroupOptions options = RegroupOptionsOf(run.settings);
  for (;;) {
    if (++run.regroups > run.settings.max_regroups) {
      return absl::ResourceExhaustedError(absl::StrCat("elastic: gave up after ", run.settings.max_regroups,
                                                       " regroups (DDP_ELASTIC_MAX_REGROUPS)"));
    }
    DDP_ASSIGN_OR_RETURN(run.generation,
                         AgreeNextGeneration(*dist.store, run.generation, state.member,
                                             run.holds_state ? state.global_step : -1, options, joiners));
    joiners.clear();
    if (run.holds_state) DDP_RETURN_IF_ERROR(AnnounceAdmissions(*dist.store, run.generation));
    MaybeKillInRegroup(state.fault, state.member);
    const absl::Status joined = FormGeneration(config, dist, run, state, options);
    if (joined.ok()) return absl::OkStatus();
    if (!IsRecoverableByRegroup(joined)) return joined;
    Say(absl::StrCat("launch rank ", state.member, ": forming ", run.generation.ToString(), " failed (",
                     joined.ToString(), "); regrouping again"));
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
absl::Status CheckElasticLaunch(const std::string& backend, const DistributedContext& dist) {
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

// Drops every object that uses the group, and the group: its connections close and its shared-memory
// segments go.
void DropGroup(DistributedContext& dist, ElasticRun& run, TrainState& state, const ElasticHooks& hooks) {
  if (state.ddp != nullptr) {
    const std::string order = state.ddp->reducer().RebuiltOrderText();
    if (!order.empty()) run.bucket_order = order;
  }
  hooks.detach();
  ClearGradients(state.model);
  state.ddp = nullptr;
  state.group = nullptr;
  dist.group.reset();
}

// From the group that just ended: regroups (adding `joiners`), or with `decided` forms run.generation as
// decided, until DDP and the loader stand over a generation's group; below the minimum world size, stops.
absl::Status Settle(const TrainConfig& config, DistributedContext& dist, ElasticRun& run, TrainState& state,
                    const ElasticHooks& hooks, std::vector<int> joiners, bool decided) {
  for (;;) {
    DropGroup(dist, run, state, hooks);
    if (decided) {
      decided = false;
      const absl::Status formed = FormGeneration(config, dist, run, state, RegroupOptionsOf(run.settings));
      if (!formed.ok()) {
        if (!IsRecoverableByRegroup(formed)) return formed;
        Say(absl::StrCat("launch member ", state.member, ": forming ", run.generation.ToString(), " failed (",
                         formed.ToString(), "); regrouping"));
        DropGroup(dist, run, state, hooks);
        DDP_RETURN_IF_ERROR(Regroup(config, dist, run, state, {}));
      }
    } else {
      DDP_RETURN_IF_ERROR(Regroup(config, dist, run, state, std::move(joiners)));
      joiners.clear();
    }
    state.attempt = run.attempt_base + static_cast<int>(run.generation.number);
    if (static_cast<int>(run.generation.members.size()) < run.settings.min_world_size) {
      return StopBelowMinimum(config, run.settings, run.generation, state);
    }
    const absl::Status attached = hooks.attach(run.bucket_order);  // DDP's wrap communicates: a member may be lost there too
    if (attached.ok()) return absl::OkStatus();
    if (!IsRecoverableByRegroup(attached)) return attached;
    Say(absl::StrCat("launch rank ", state.member, ": rebuilding DDP over ", run.generation.ToString(), " failed (",
                     attached.message().substr(0, 300), "); regrouping again"));
  }
}

// --elastic_join_at_step (testing): at that step the members wait until a replacement registered.
absl::StatusOr<bool> HoldForJoiner(const TrainConfig& config, Store& store, const ElasticRun& run) {
  const absl::Time deadline = absl::Now() + run.settings.join_timeout;
  for (;;) {
    DDP_ASSIGN_OR_RETURN(const std::vector<int> waiting,
                         WaitingJoiners(store, run.first_replacement, run.generation.members));
    if (!waiting.empty()) return true;
    if (absl::Now() >= deadline) {
      return absl::FailedPreconditionError(absl::StrCat(
          "elastic: --elastic_join_at_step=", config.elastic_join_at_step, ": no replacement registered within ",
          absl::FormatDuration(run.settings.join_timeout), " (DDP_ELASTIC_JOIN_TIMEOUT_S)"));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
}

// Installs TrainState::joiner_waiting for the run's lifetime: a store poll at most every
// settings.joiner_poll_interval (so a step pays nothing most of the time), or the test hold. It also
// prints (rank 0) the completion time of the first step after an admission, which
// tools/elastic_recovery.sh reads.
class JoinerWatch {
 public:
  JoinerWatch(const TrainConfig& config, DistributedContext& dist, ElasticRun& run, TrainState& state)
      : state_(state) {
    state.joiner_waiting = [&config, &dist, &run, &state]() -> absl::StatusOr<bool> {
      // Asked at a step's start, so the previous step has just completed.
      if (run.report_after_step >= 0 && state.global_step > run.report_after_step) {
        if (state.rank == 0) {
          Say(absl::StrFormat("step %d completed at %.3f, the first with the replacement(s) of %s", state.global_step,
                              absl::ToUnixMicros(absl::Now()) / 1e6, run.generation.ToString()));
        }
        run.report_after_step = -1;
      }
      if (config.elastic_join_at_step > 0) {
        if (state.global_step + 1 != config.elastic_join_at_step) return false;
        return HoldForJoiner(config, *dist.store, run);
      }
      const absl::Time now = absl::Now();
      if (now - run.last_joiner_poll < run.settings.joiner_poll_interval) return false;
      run.last_joiner_poll = now;
      DDP_ASSIGN_OR_RETURN(const std::vector<int> waiting,
                           WaitingJoiners(*dist.store, run.first_replacement, run.generation.members));
      return !waiting.empty();
    };
  }
  ~JoinerWatch() { state_.joiner_waiting = nullptr; }
  JoinerWatch(const JoinerWatch&) = delete;
  JoinerWatch& operator=(const JoinerWatch&) = delete;

 private:
  TrainState& state_;
};

// Rank 0's line once a generation formed and DDP stands over it.
void SayFormed(const ElasticRun& run, const TrainState& state, absl::Time since, const char* since_what) {
  if (state.rank != 0) return;
  Say(absl::StrFormat("%s formed: rank 0 of %d continues from step %d (epoch %d, %d samples of it consumed), "
                      "%.3f s after %s",
                      run.generation.ToString(), state.world_size, state.global_step, state.position.epoch,
                      state.position.consumed, absl::ToDoubleSeconds(absl::Now() - since), since_what));
  Say(absl::StrCat(run.generation.ToString(), ": rank 0 holds ", ProcessResources()));
}

// Runs hooks.run from `epoch`, and after each recoverable failure or agreed admission regroups and runs
// again from the agreed state.
absl::StatusOr<EvalResult> ElasticMain(const TrainConfig& config, DistributedContext& dist, TrainState& state,
                                       const ElasticHooks& hooks, ElasticRun& run, int epoch) {
  JoinerWatch watch(config, dist, run, state);
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
    std::vector<int> joiners;
    const bool admitting = state.joiner_admitted;
    state.joiner_admitted = false;
    if (admitting) {
      DDP_ASSIGN_OR_RETURN(joiners, WaitingJoiners(*dist.store, run.first_replacement, run.generation.members));
      if (state.rank == 0) {
        Say(absl::StrCat(run.generation.ToString(), ": admitting replacement(s) ", absl::StrJoin(joiners, ", "),
                         " after step ", state.global_step));
      }
    } else {
      Say(absl::StrCat("launch rank ", state.member, ": ", run.generation.ToString(), " failed at step ",
                       state.global_step, " (", result.status().message().substr(0, 300), "); regrouping"));
    }
    DDP_RETURN_IF_ERROR(Settle(config, dist, run, state, hooks, std::move(joiners), /*decided=*/false));
    SayFormed(run, state, noticed, admitting ? "the admission was agreed" : "the failure was noticed");
    if (admitting) run.report_after_step = state.global_step;
    epoch = static_cast<int>(state.position.epoch);
    state.resume_from = state.position;
  }
}

// A run that ends with an error ends the elastic job: no more replacements, and one still waiting stops
// (ElasticClosedKey). A member the others left out (kAborted) ends alone.
absl::StatusOr<EvalResult> CloseOnError(DistributedContext& dist, absl::StatusOr<EvalResult> result) {
  if (!result.ok() && !absl::IsAborted(result.status())) (void)dist.store->Add(ElasticClosedKey(), 1);
  return result;
}

absl::StatusOr<int> ReplacementMember(const EnvLookup& env, int world_size) {
  const std::optional<std::string> text = env("DDP_ELASTIC_MEMBER");
  int member = -1;
  if (!text.has_value() || !absl::SimpleAtoi(*text, &member) || member < world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DDP_ELASTIC_MEMBER=\"", text.value_or(""), "\": a replacement (DDP_ELASTIC_JOIN=1) needs its member id, an "
        "integer >= WORLD_SIZE (", world_size, "), as ddprun --elastic sets it"));
  }
  return member;
}

}  // namespace

absl::StatusOr<ElasticSettings> ElasticSettingsFromEnv(const EnvLookup& env) {
  ElasticSettings settings;
  DDP_ASSIGN_OR_RETURN(const int64_t min_world, IntegerVariable(env, "DDP_ELASTIC_MIN_WORLD_SIZE", 1, 1));
  DDP_ASSIGN_OR_RETURN(const int64_t max_regroups, IntegerVariable(env, "DDP_ELASTIC_MAX_REGROUPS", 16, 0));
  DDP_ASSIGN_OR_RETURN(const int64_t arrival_s, IntegerVariable(env, "DDP_ELASTIC_ARRIVAL_TIMEOUT_S", 30, 1));
  DDP_ASSIGN_OR_RETURN(const int64_t join_s, IntegerVariable(env, "DDP_ELASTIC_JOIN_TIMEOUT_S", 300, 1));
  if (max_regroups >= kGenerationsPerAttempt) {
    return absl::InvalidArgumentError(
        absl::StrCat("DDP_ELASTIC_MAX_REGROUPS=", max_regroups, ": at most ", kGenerationsPerAttempt - 1));
  }
  settings.min_world_size = static_cast<int>(std::min<int64_t>(min_world, 1 << 20));
  settings.max_regroups = static_cast<int>(max_regroups);
  settings.arrival_timeout = absl::Seconds(arrival_s);
  settings.join_timeout = absl::Seconds(join_s);
  return settings;
}

bool IsRecoverableByRegroup(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) || absl::IsAborted(status);
}

bool IsElasticReplacement(const EnvLookup& env) { return env("DDP_ELASTIC_JOIN").value_or("") == "1"; }

absl::StatusOr<EvalResult> RunElastic(const TrainConfig& config, DistributedContext& dist, TrainState& state,
                                      int first_epoch, const ElasticHooks& hooks) {
  ElasticRun run;
  DDP_ASSIGN_OR_RETURN(run.settings, ElasticSettingsFromEnv(ProcessEnv()));
  DDP_RETURN_IF_ERROR(CheckElasticLaunch(dist.group->backend_name(), dist));
  run.backend = dist.group->backend_name();
  run.generation = FirstGeneration(state.world_size);
  run.first_replacement = dist.launch.world_size;
  state.member = dist.launch.rank;
  run.attempt_base = dist.launch.restart_count * kGenerationsPerAttempt;
  state.attempt = run.attempt_base;
  if (state.rank == 0) Say(absl::StrCat(run.generation.ToString(), ": rank 0 holds ", ProcessResources()));
  return CloseOnError(dist, ElasticMain(config, dist, state, hooks, run, first_epoch));
}

absl::StatusOr<EvalResult> RunElasticJoiner(const TrainConfig& config, DistributedContext& dist, TrainState& state,
                                            const ElasticHooks& hooks) {
  ElasticRun run;
  DDP_ASSIGN_OR_RETURN(run.settings, ElasticSettingsFromEnv(ProcessEnv()));
  DDP_RETURN_IF_ERROR(CheckElasticLaunch(config.backend, dist));
  DDP_ASSIGN_OR_RETURN(state.member, ReplacementMember(ProcessEnv(), dist.launch.world_size));
  run.backend = config.backend;
  run.first_replacement = dist.launch.world_size;
  run.attempt_base = dist.launch.restart_count * kGenerationsPerAttempt;
  run.holds_state = false;
  DDP_RETURN_IF_ERROR(RegisterJoiner(*dist.store, state.member));
  const absl::Time registered = absl::Now();
  Say(absl::StrCat("replacement member ", state.member, " (for rank ", dist.launch.rank,
                   ") registered; waiting to be admitted"));
  AdmissionOptions admission;
  admission.timeout = run.settings.join_timeout;
  DDP_ASSIGN_OR_RETURN(run.generation, AwaitAdmission(*dist.store, state.member, admission));
  DDP_RETURN_IF_ERROR(Settle(config, dist, run, state, hooks, {}, /*decided=*/true));
  Say(absl::StrFormat("replacement member %d joined %s as rank %d of %d at step %d, %.3f s after it registered",
                      state.member, run.generation.ToString(), state.rank, state.world_size, state.global_step,
                      absl::ToDoubleSeconds(absl::Now() - registered)));
  state.resume_from = state.position;
  return CloseOnError(dist, ElasticMain(config, dist, state, hooks, run, static_cast<int>(state.position.epoch)));
}

}  // namespace ddp
