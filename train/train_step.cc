// TrainEpoch: the step loop (micro-batches, optimizer step, sample log, checkpoint, desync check,
// injected faults, progress, SIGTERM) and its helpers.
#include "train/train_step.h"

#include <cmath>
#include <cstdio>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "comm/rank_agreement.h"
#include "ddp/desync_check.h"
#include "ddp/join.h"
#include "ddp/rank_zero.h"
#include "ddp/sync_batch_norm.h"
#include "ddp/zero_redundancy_optimizer.h"
#include "nn/clip_grad.h"
#include "nn/safetensors.h"
#include "nn/torch_save.h"
#include "nn/weights_file.h"
#include "tensor/autocast.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "train/auto_bucket_caps.h"
#include "train/auto_bucket_caps_record.h"
#include "train/autocast_record.h"
#include "train/data_record.h"
#include "train/finite_checks.h"
#include "train/graceful_stop.h"
#include "train/progress.h"
#include "train/stop_agreement.h"

namespace ddp {
namespace {

// --dump_grads: writes the gradients `model` holds (after DDP's all-reduce: averaged) to `path`, in
// torch.save's format when the path ends in .pt or .pth, else as safetensors.
absl::Status DumpGradients(const Module& model, const std::string& path) {
  NamedTensors grads;
  for (const auto& [name, param] : model.NamedParameters()) {
    if (param.grad().defined()) grads.emplace_back(name, param.grad());
  }
  if (IsTorchSavePath(path)) return SaveTorchStateDict(path, grads);
  return SaveSafetensors(path, grads, {{"content", "gradients of the first backward pass"}});
}

// One forward + backward on `batch`; the loss is divided by the accumulation count. Returns the loss.
absl::StatusOr<double> ForwardBackward(TrainState& state, const Example& batch, bool synchronise) {
  const Tensor input = ToDevice(batch.input, state.device);  // no copy on the CPU
  // --precision=bf16|fp16: forward and loss under autocast (Note [Autocast], Note [fp16 autocast] in
  // tensor/autocast.h); the scope ends before backward, which reuses the copies the forward saved.
  std::optional<AutocastScope> autocast;
  if (state.config.precision == "bf16") autocast.emplace(true, DType::kBFloat16);
  if (state.config.precision == "fp16") autocast.emplace(true, DType::kFloat16);
  Tensor logits;
  if (state.dp != nullptr) {
    DDP_ASSIGN_OR_RETURN(logits, state.dp->TryForward(input));
  } else if (state.ddp == nullptr) {
    logits = state.model.Forward(input);
  } else if (synchronise) {
    DDP_ASSIGN_OR_RETURN(logits, state.ddp->TryForward(input));
  } else {
    auto guard = state.ddp->NoSync();
    DDP_ASSIGN_OR_RETURN(logits, state.ddp->TryForward(input));
  }
  // --sync_bn: a failed collective inside a layer is kept there (ddp/sync_batch_norm.h); the step stops.
  const bool sync_bn = state.config.sync_bn && state.ddp != nullptr;
  if (sync_bn) DDP_RETURN_IF_ERROR(SyncBatchNormStatus(state.model));
  Tensor loss = CrossEntropy(logits, ToDevice(batch.target, logits.device()));
  autocast.reset();
  const double value = loss.item();
  for (StepObserver* observer : state.loop.observers) observer->ForwardDone();
  if (state.config.accumulate_steps > 1) loss = MulScalar(loss, 1.0f / state.config.accumulate_steps);
  if (state.scaler != nullptr) loss = state.scaler->Scale(loss);  // Note [Loss scaling] in nn/grad_scaler.h
  loss.Backward();
  if (state.ddp != nullptr) DDP_RETURN_IF_ERROR(state.ddp->status());
  if (sync_bn) DDP_RETURN_IF_ERROR(SyncBatchNormStatus(state.model));
  for (StepObserver* observer : state.loop.observers) DDP_RETURN_IF_ERROR(observer->BackwardDone());
  return value;
}

// Starts `epoch` from its beginning, or (the first epoch after --resume) where the checkpoint left it.
absl::Status StartEpoch(TrainState& state, int epoch, DistributedSampler& sampler) {
  if (state.resume_from.has_value() && state.resume_from->epoch == epoch) {
    const SamplerState resume = *state.resume_from;
    state.resume_from.reset();
    DDP_RETURN_IF_ERROR(sampler.Restore(resume));
  } else {
    sampler.SetEpoch(epoch);
  }
  if (state.train_images != nullptr) state.train_images->SetEpoch(epoch);
  state.position = sampler.State(0);
  return absl::OkStatus();
}

// The sampler's state after this rank consumed the batches of `steps_done` optimizer steps of the epoch
// (lockstep: every rank the same number), as checkpoints record it.
SamplerState PositionAfter(const TrainConfig& config, const DistributedSampler& sampler, int64_t steps_done) {
  return sampler.State(std::min(steps_done * config.accumulate_steps * config.batch_size, sampler.Length()));
}

// Saves a checkpoint after this step when --checkpoint_every says so, or with `force` whenever there is a
// --checkpoint_dir (the agreed stop after a SIGTERM). Collective under DDP: rank 0 writes. A step-N that
// exists already is never replaced (GuardExistingCheckpoints cleared the run's future steps at start; one
// there now belongs to another run), and weights that are not finite are never saved: rank 0's error
// (the loss watch's, when it tripped) then reaches every rank.
absl::Status MaybeCheckpoint(const TrainState& state, const DistributedSampler* sampler,
                             int64_t local_consumed, int epoch, bool force, const LossWatch& watch) {
  const TrainConfig& config = state.config;
  if (config.checkpoint_dir.empty()) return absl::OkStatus();
  if (!force && (config.checkpoint_every <= 0 || state.global_step % config.checkpoint_every != 0)) {
    return absl::OkStatus();
  }
  if (sampler == nullptr) {
    return absl::FailedPreconditionError(
        "a checkpoint records the sampler's position, and these batches come from no sampler");
  }
  // --zero: the shards' state is gathered to rank 0 in the unsharded form, which rank 0 saves.
  if (state.zero != nullptr) DDP_RETURN_IF_ERROR(state.zero->ConsolidateStateDict(0));
  Checkpoint checkpoint =
      CaptureCheckpoint(state.model, &state.optimizer, sampler->State(std::min(local_consumed, sampler->Length())),
                        /*generator=*/nullptr, state.global_step, epoch);
  if (state.ddp != nullptr) {
    const std::string order = state.ddp->reducer().RebuiltOrderText();
    if (!order.empty()) checkpoint.extra_state[kBucketOrderStateName] = order;
  }
  if (state.scaler != nullptr) checkpoint.extra_state[kGradScalerStateName] = state.scaler->StateText();
  checkpoint.extra_state[kAutocastStateName] = EncodeAutocastRecord(CurrentAutocastRecord(config));
  checkpoint.extra_state[kDataStateName] = EncodeDataRecord(CurrentDataRecord(config));
  if (state.auto_caps != nullptr) {
    if (const std::optional<AutoBucketCapsRecord> record = state.auto_caps->Record(); record.has_value()) {
      DDP_ASSIGN_OR_RETURN(checkpoint.extra_state[kAutoBucketCapsStateName], EncodeAutoBucketCapsRecord(*record));
    }
  }
  SaveCheckpointOptions options;
  options.keep_last = config.keep_checkpoints;
  options.replace_existing = false;
  const auto save = [&]() -> absl::Status {
    if (watch.tripped()) return watch.Error(config, state.world_size);
    DDP_RETURN_IF_ERROR(RequireFiniteWeights(
        state.model, absl::StrCat("not saving the checkpoint of step ", state.global_step)));
    return SaveCheckpoint(config.checkpoint_dir, checkpoint, options);
  };
  return RunOnRankZero(state.group, save);
}

}  // namespace

std::unique_ptr<AdaptiveThreads> AttachAdaptiveThreads(const TrainConfig& config, TrainState& state) {
  if (!config.adapt_threads) return nullptr;
  auto adaptive = std::make_unique<AdaptiveThreads>(AdaptiveThreadsOptions{config.threads}, stderr);
  state.loop.observers.push_back(adaptive.get());
  return adaptive;
}

std::unique_ptr<GradScaler> MakeGradScaler(const TrainConfig& config) {
  if (!GradScalerEnabled(config)) return nullptr;
  GradScalerOptions options;
  options.init_scale = static_cast<float>(config.grad_scaler_init_scale);
  options.growth_factor = config.grad_scaler_growth_factor;
  options.backoff_factor = config.grad_scaler_backoff_factor;
  options.growth_interval = config.grad_scaler_growth_interval;
  return std::make_unique<GradScaler>(options);
}

double ScheduledLr(const TrainConfig& config, int64_t step, int64_t total_steps) {
  const int64_t warmup = config.warmup_steps;
  if (step < warmup) return config.lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const int64_t annealed = total_steps - warmup;
  if (config.lr_schedule == "constant" || annealed <= 0) return config.lr;
  return config.lr * 0.5 *
         (1.0 + std::cos(M_PI * static_cast<double>(step - warmup) / static_cast<double>(annealed)));
}

namespace {

// Without --join the planned step count of each epoch must agree (the flags agreed at start-up, Note
// [Train settings agreement]; the data may still differ per rank): a rank with fewer batches would leave
// the others waiting.
absl::Status CheckPlannedStepsAgree(const TrainState& state, int64_t planned_steps) {
  if (state.config.join) return absl::OkStatus();
  return CheckRanksAgree(
      *state.group, {{"training steps this epoch (uneven inputs need --join)", absl::StrCat(planned_steps)}},
      "train/train settings");
}

// --grad_scaler: unscales the gradients and says whether the step must be skipped because some gradient
// holds inf or NaN. Under DDP the ranks agree (a one-element max all-reduce): the averaged gradients are
// the same on every rank, so they agree anyway, but a rank that skipped alone would leave its replica
// behind for good, so the decision is made once for all.
absl::StatusOr<bool> UnscaleAndAgreeOnSkip(const TrainState& state) {
  bool found_inf = state.scaler->UnscaleGradients(state.optimizer.params());
  if (state.group == nullptr) return found_inf;
  // On the parameters' device: NCCL reduces device memory only.
  Tensor flag = ToDevice(FromVector(std::vector<float>{found_inf ? 1.0f : 0.0f}, {1}), state.device);
  const absl::Status status = state.group->AllReduce(flag, ReduceOp::kMax)->Wait(state.group->timeout());
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("--grad_scaler's inf/NaN agreement: ", status.message()));
  }
  return ToDevice(flag, Device::CPU()).ToVector<float>()[0] > 0.0f;
}

// Whether the step drops the gradients instead of zeroing them (Module::ZeroGrad, PyTorch 2.x's
// zero_grad()): the backward pass then hands each parameter its gradient without a fill or a sum. Not
// where gradients are views into DDP's buckets (--grad_as_bucket_view), nor under DataParallel or ZeRO,
// whose replicas and shards write into the gradients they find.
bool GradientsSetToNone(const TrainState& state) {
  return !state.config.grad_as_bucket_view && state.dp == nullptr && state.zero == nullptr;
}

// One optimizer step: accumulate_steps forward/backward passes, the optimizer, the sample log.
// Returns the mean loss and adds the step's samples to `samples`.
absl::StatusOr<double> TrainStep(TrainState& state, int epoch, BatchSource& batches, int64_t* samples) {
  const TrainConfig& config = state.config;
  state.model.ZeroGrad(GradientsSetToNone(state));
  double loss_sum = 0;
  std::vector<int64_t> ids;  // the step's sample indices, for --log_samples
  for (int micro = 0; micro < config.accumulate_steps; ++micro) {
    DDP_ASSIGN_OR_RETURN(std::optional<Example> batch, batches.Next());
    if (!batch) {
      return absl::InternalError(absl::StrCat("the batches ran out in optimizer step ", state.global_step + 1));
    }
    DDP_ASSIGN_OR_RETURN(double loss, ForwardBackward(state, *batch, micro == config.accumulate_steps - 1));
    loss_sum += loss;
    *samples += batch->target.size(0);
    if (state.sample_log != nullptr) ids.insert(ids.end(), batch->indices.begin(), batch->indices.end());
  }
  // --grad_scaler: a step whose gradients overflowed is skipped on every rank (torch's scaler.step);
  // global_step and the schedule advance all the same, as torch's scheduler.step() does.
  bool skip = false;
  if (state.scaler != nullptr) {
    DDP_ASSIGN_OR_RETURN(skip, UnscaleAndAgreeOnSkip(state));
  }
  if (state.global_step == 0 && !config.dump_grads.empty() && state.rank == 0) {
    DDP_RETURN_IF_ERROR(DumpGradients(state.model, config.dump_grads));
  }
  if (config.clip_grad_norm > 0 && !skip) {
    // Under --zero each rank holds a shard: the squared norms are summed across ranks (Note [ZeRO-1]).
    DDP_RETURN_IF_ERROR(state.zero != nullptr ? state.zero->ClipGradNorm(config.clip_grad_norm).status()
                                              : ClipGradNorm(state.optimizer.params(), config.clip_grad_norm).status());
  }
  state.optimizer.set_lr(static_cast<float>(ScheduledLr(config, state.global_step, state.total_steps)));
  if (skip) {
    // no optimizer step
  } else if (state.zero != nullptr) {
    DDP_RETURN_IF_ERROR(state.zero->TryStep());
  } else {
    state.optimizer.Step();
  }
  if (state.scaler != nullptr) state.scaler->Update(skip);
  state.skipped_steps += skip ? 1 : 0;
  ++state.global_step;
  if (state.sample_log != nullptr) {
    DDP_RETURN_IF_ERROR(state.sample_log->Append(
        SampleLogEntry{state.attempt, state.world_size, state.rank, epoch, state.global_step, std::move(ids)}));
  }
  return loss_sum / config.accumulate_steps;
}

// The per-step work after the optimizer: auto bucket caps, checkpoint, desync check, injected faults,
// bucket printout.
absl::Status AfterStep(TrainState& state, const DistributedSampler* sampler, int64_t step, int epoch,
                       const LossWatch& watch) {
  const TrainConfig& config = state.config;
  // --bucket_cap_mb=auto: measures, and once chooses and rebuckets (Note [Auto bucket caps]). Before the
  // checkpoint, so that a checkpoint of this step holds a choice made at it and a resume applies it where
  // this run did: before the next step.
  if (state.auto_caps != nullptr) DDP_RETURN_IF_ERROR(state.auto_caps->AfterStep());
  DDP_RETURN_IF_ERROR(MaybeCheckpoint(state, sampler,
                                      (step + 1) * config.accumulate_steps * config.batch_size, epoch,
                                      /*force=*/false, watch));
  if (state.group != nullptr && config.check_sync_every > 0) {
    DesyncCheckOptions compared;
    compared.compare_buffers = state.ddp == nullptr;  // DDP re-broadcasts buffers every forward (train's default)
    DDP_RETURN_IF_ERROR(
        MaybeCheckReplicasInSync(state.model, *state.group, state.global_step, config.check_sync_every, compared));
  }
  MaybeKillAfterStep(state.fault, state.member >= 0 ? state.member : state.rank, state.global_step);
  MaybeReportStepAfterFault(state.fault, state.rank, state.global_step);
  if (state.ddp != nullptr && config.print_buckets && state.rank == 0 && state.global_step == 2) {
    std::fprintf(stderr, "buckets after the rebuild:\n%s", state.ddp->reducer().DescribeBuckets().c_str());
  }
  return absl::OkStatus();
}

// Leaves the epoch's Join: shadows the ranks still training, takes the last joiner's model, and its
// step count (ranks that ran fewer steps continue the schedule from there).
absl::Status FinishJoin(TrainState& state, Join& join) {
  DDP_RETURN_IF_ERROR(join.Finish());
  if (join.last_joiner() < 0) return absl::OkStatus();
  std::string step = absl::StrCat(state.global_step);
  DDP_RETURN_IF_ERROR(state.group->BroadcastObject(&step, join.last_joiner()));
  if (!absl::SimpleAtoi(step, &state.global_step)) return absl::DataLossError("Join: a malformed step count");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EpochStats> TrainEpoch(TrainState& state, int epoch, DataLoader& loader) {
  const TrainConfig& config = state.config;
  auto* sampler = dynamic_cast<DistributedSampler*>(loader.sampler());
  DDP_CHECK(sampler != nullptr) << "train/train's loader uses a DistributedSampler";
  DDP_RETURN_IF_ERROR(StartEpoch(state, epoch, *sampler));
  DDP_RETURN_IF_ERROR(loader.Begin());
  LoaderBatches batches(loader);
  int64_t steps = loader.NumBatches() / config.accumulate_steps;
  if (config.max_steps > 0) steps = std::min(steps, config.max_steps - state.global_step);
  steps = StepsWithUnevenInputs(state.fault, state.rank, steps);
  if (state.group != nullptr) DDP_RETURN_IF_ERROR(CheckPlannedStepsAgree(state, steps));
  return RunSteps(state, epoch, batches, steps);
}

absl::StatusOr<EpochStats> RunSteps(TrainState& state, int epoch, BatchSource& batches, int64_t steps) {
  const TrainConfig& config = state.config;
  std::unique_ptr<Join> join;
  if (state.ddp != nullptr && config.join) join = std::make_unique<Join>(state.ddp, JoinOptions{});
  StopAgreement stop(state.loop.agree_on_stop ? state.group : nullptr, join.get());
  // Note [Non-finite loss]: a tripped watch asks every rank to stop through the stop agreement (where the
  // ranks have one; in one process the step itself stops).
  const bool stop_together = state.group != nullptr && state.loop.agree_on_stop;
  LossWatch watch(state.global_step);
  ProgressReporter progress(state.loop.progress, absl::StrCat("epoch ", epoch), steps);
  state.model.Train();
  bool stopping = false;
  bool admitting = false;  // --elastic: the ranks agreed to admit a waiting replacement after this step
  int64_t step = 0;
  for (; step < steps && !stopping && !admitting; ++step) {
    for (StepObserver* observer : state.loop.observers) observer->StepBegan();
    bool joiner_waiting = false;
    if (stop_together && state.joiner_waiting) {
      DDP_ASSIGN_OR_RETURN(joiner_waiting, state.joiner_waiting());
    }
    DDP_RETURN_IF_ERROR(
        stop.BeginStep(GracefulStopRequested() || (stop_together && watch.tripped()), joiner_waiting));
    int64_t samples = 0;
    DDP_ASSIGN_OR_RETURN(const double loss, TrainStep(state, epoch, batches, &samples));
    if (batches.sampler() != nullptr) state.position = PositionAfter(config, *batches.sampler(), step + 1);
    watch.Observe(state.global_step, loss, state.rank);
    if (state.group == nullptr && watch.tripped()) return watch.Error(config, 1);
    DDP_ASSIGN_OR_RETURN(const StopAgreement::Boundary boundary, stop.EndStep());
    stopping = boundary.stop;
    admitting = boundary.admit_joiner;
    if (!stopping) DDP_RETURN_IF_ERROR(AfterStep(state, batches.sampler(), step, epoch, watch));
    for (StepObserver* observer : state.loop.observers) observer->StepEnded();
    if (state.rank == 0) progress.Step(samples * state.world_size, loss);
  }
  if (join != nullptr) DDP_RETURN_IF_ERROR(FinishJoin(state, *join));
  DDP_RETURN_IF_ERROR(AgreeLossesFinite(state.group, config, watch));
  if (stopping) {  // Note [Stop agreement]: every rank stops after this step and saves it
    DDP_RETURN_IF_ERROR(MaybeCheckpoint(state, batches.sampler(),
                                        step * config.accumulate_steps * config.batch_size, epoch,
                                        /*force=*/true, watch));
    return absl::CancelledError(absl::StrCat("stopped by SIGTERM after step ", state.global_step,
                                             state.group != nullptr ? " (every rank)" : ""));
  }
  if (admitting) {  // train/elastic_loop.h regroups with the replacement from this step boundary
    state.joiner_admitted = true;
    return absl::AbortedError(absl::StrCat("elastic: admitting a replacement after step ", state.global_step));
  }
  if (state.rank == 0) progress.Finish();
  if (state.rank == 0 && state.scaler != nullptr) {
    std::fprintf(stderr, "grad_scaler: %lld optimizer steps skipped so far (inf/NaN gradients); loss scale %g\n",
                 static_cast<long long>(state.skipped_steps), state.scaler->scale());
  }
  return EpochStats{steps, progress.mean_loss(), progress.samples_per_second()};
}

}  // namespace ddp
