// TrainEpoch: the step loop (micro-batches, optimizer step, sample log, checkpoint, desync check,
// injected faults, progress, SIGTERM) and its helpers.
#include "examples/train_step.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

#include "checkpoint/checkpoint.h"
#include "ddp/desync_check.h"
#include "ddp/rank_zero.h"
#include "examples/graceful_stop.h"
#include "examples/progress.h"
#include "nn/safetensors.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

// --dump_grads: writes the gradients `model` holds (after DDP's all-reduce: averaged) to `path`.
absl::Status DumpGradients(const Module& model, const std::string& path) {
  NamedTensors grads;
  for (const auto& [name, param] : model.NamedParameters()) {
    if (param.grad().defined()) grads.emplace_back(name, param.grad());
  }
  return SaveSafetensors(path, grads, {{"content", "gradients of the first backward pass"}});
}

// One forward + backward on `batch`; the loss is divided by the accumulation count. Returns the loss.
absl::StatusOr<double> ForwardBackward(TrainState& state, const Example& batch, bool synchronise) {
  const Tensor input = ToDevice(batch.input, state.device);  // no copy on the CPU
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
  Tensor loss = CrossEntropy(logits, ToDevice(batch.target, logits.device()));
  const double value = loss.item();
  if (state.config.accumulate_steps > 1) loss = MulScalar(loss, 1.0f / state.config.accumulate_steps);
  loss.Backward();
  if (state.ddp != nullptr) DDP_RETURN_IF_ERROR(state.ddp->status());
  return value;
}

// Starts `epoch` from its beginning, or (the first epoch after --resume) where the checkpoint left it.
absl::Status StartEpoch(TrainState& state, int epoch, DistributedSampler& sampler) {
  if (state.resume_from.has_value() && state.resume_from->epoch == epoch) {
    const SamplerState resume = *state.resume_from;
    state.resume_from.reset();
    return sampler.Restore(resume);
  }
  sampler.SetEpoch(epoch);
  return absl::OkStatus();
}

// Saves a checkpoint after this step when --checkpoint_every says so (collective under DDP).
absl::Status MaybeCheckpoint(const TrainState& state, const DistributedSampler& sampler, int64_t local_consumed,
                             int epoch) {
  const TrainConfig& config = state.config;
  if (config.checkpoint_dir.empty() || config.checkpoint_every <= 0) return absl::OkStatus();
  if (state.global_step % config.checkpoint_every != 0) return absl::OkStatus();
  Checkpoint checkpoint =
      CaptureCheckpoint(state.model, &state.optimizer, sampler.State(std::min(local_consumed, sampler.Length())),
                        /*generator=*/nullptr, state.global_step, epoch);
  if (state.ddp != nullptr) checkpoint.ddp_bucket_order = state.ddp->reducer().RebuiltOrderText();
  SaveCheckpointOptions options;
  options.keep_last = config.keep_checkpoints;
  if (state.group != nullptr) return SaveCheckpointCollective(*state.group, config.checkpoint_dir, checkpoint, options);
  return SaveCheckpoint(config.checkpoint_dir, checkpoint, options);
}

}  // namespace

double ScheduledLr(const TrainConfig& config, int64_t step, int64_t total_steps) {
  if (config.lr_schedule == "constant" || total_steps <= 0) return config.lr;
  return config.lr * 0.5 * (1.0 + std::cos(M_PI * static_cast<double>(step) / static_cast<double>(total_steps)));
}

absl::StatusOr<EpochStats> TrainEpoch(TrainState& state, int epoch, DataLoader& loader) {
  const TrainConfig& config = state.config;
  auto* sampler = dynamic_cast<DistributedSampler*>(loader.sampler());
  DDP_CHECK(sampler != nullptr) << "examples/train's loader uses a DistributedSampler";
  DDP_RETURN_IF_ERROR(StartEpoch(state, epoch, *sampler));
  DDP_RETURN_IF_ERROR(loader.Begin());
  const int64_t micro_batches = loader.NumBatches();
  int64_t steps = micro_batches / config.accumulate_steps;
  if (config.max_steps > 0) steps = std::min(steps, config.max_steps - state.global_step);
  ProgressReporter progress(stderr, absl::StrCat("epoch ", epoch), steps);
  state.model.Train();
  for (int64_t step = 0; step < steps; ++step) {
    state.model.ZeroGrad();
    double loss_sum = 0;
    int64_t samples = 0;
    std::vector<int64_t> ids;  // the step's sample indices, for --log_samples
    for (int micro = 0; micro < config.accumulate_steps; ++micro) {
      DDP_ASSIGN_OR_RETURN(std::optional<Example> batch, loader.Next());
      if (!batch) return absl::InternalError(absl::StrCat("DataLoader ended before its ", micro_batches, " batches"));
      DDP_ASSIGN_OR_RETURN(double loss, ForwardBackward(state, *batch, micro == config.accumulate_steps - 1));
      loss_sum += loss;
      samples += batch->target.size(0);
      if (state.sample_log != nullptr) ids.insert(ids.end(), batch->indices.begin(), batch->indices.end());
    }
    if (state.global_step == 0 && !config.dump_grads.empty() && state.rank == 0) {
      DDP_RETURN_IF_ERROR(DumpGradients(state.model, config.dump_grads));
    }
    state.optimizer.set_lr(static_cast<float>(ScheduledLr(config, state.global_step, state.total_steps)));
    state.optimizer.Step();
    ++state.global_step;
    if (state.sample_log != nullptr) {
      DDP_RETURN_IF_ERROR(state.sample_log->Append(
          SampleLogEntry{state.attempt, state.world_size, state.rank, epoch, state.global_step, std::move(ids)}));
    }
    DDP_RETURN_IF_ERROR(MaybeCheckpoint(state, *sampler, (step + 1) * config.accumulate_steps * config.batch_size,
                                        epoch));
    if (state.group != nullptr && config.check_sync_every > 0) {
      DesyncCheckOptions compared;
      compared.compare_buffers = state.ddp == nullptr;  // DDP re-broadcasts buffers every forward (train's default)
      DDP_RETURN_IF_ERROR(
          MaybeCheckReplicasInSync(state.model, *state.group, state.global_step, config.check_sync_every, compared));
    }
    MaybeKillAfterStep(state.fault, state.rank, state.global_step);
    if (state.ddp != nullptr && config.print_buckets && state.rank == 0 && state.global_step == 2) {
      std::fprintf(stderr, "buckets after the rebuild:\n%s", state.ddp->reducer().DescribeBuckets().c_str());
    }
    if (state.rank == 0) progress.Step(samples * state.world_size, loss_sum / config.accumulate_steps);
    if (GracefulStopRequested()) {
      return absl::CancelledError(absl::StrCat("stopped by SIGTERM after step ", state.global_step));
    }
  }
  if (state.rank == 0) progress.Finish();
  return EpochStats{steps, progress.mean_loss(), progress.samples_per_second()};
}

}  // namespace ddp
