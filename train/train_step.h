// One epoch of training (one process, DDP or DataParallel) and the learning-rate schedule, for
// train/trainer.cc.
#ifndef DDP_TRAIN_TRAIN_STEP_H_
#define DDP_TRAIN_TRAIN_STEP_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "data/data_loader.h"
#include "data/image_dataset.h"
#include "data/sampler.h"
#include "ddp/distributed_data_parallel.h"
#include "dp/data_parallel.h"
#include "nn/grad_scaler.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "train/adaptive_threads.h"
#include "train/batch_source.h"
#include "train/fault_injection.h"
#include "train/sample_log.h"
#include "train/step_observer.h"
#include "train/train_config.h"

namespace ddp {

class ZeroRedundancyOptimizer;  // ddp/zero_redundancy_optimizer.h
class AutoBucketCaps;           // train/auto_bucket_caps.h

// What the step loop does beyond train/train's flags: what a benchmark of the same loop changes.
struct StepLoopOptions {
  // Under DDP, agree every step on stopping after a SIGTERM (Note [Stop agreement]); false leaves the
  // per-step exchange out (and a SIGTERM then ends the process as the signal's default would).
  bool agree_on_stop = true;
  // Called at every step's phase boundaries, in this order (not owned).
  std::vector<StepObserver*> observers;
  // Where rank 0 draws the progress display (not owned; null: no display).
  FILE* progress = stderr;
};

// What the epoch loop needs; references are not owned. `ddp` is null in a single-process run.
struct TrainState {
  const TrainConfig& config;
  Module& model;
  DistributedDataParallel* ddp;
  Optimizer& optimizer;
  int rank;
  int world_size;
  DataParallel* dp = nullptr;  // --mode=dp (then ddp is null)
  ProcessGroup* group = nullptr;            // null in one process
  std::optional<SamplerState> resume_from;  // --resume: where the first trained epoch continues
  int64_t total_steps = 0;  // optimizer steps the whole run will take (for the lr schedule)
  int64_t global_step = 0;  // optimizer steps so far
  Device device = Device::CPU();  // where the model lives; batches are copied there
  int attempt = 0;          // DDP_RESTART_COUNT (ddprun's restart number)
  FaultInjection fault;     // testing: --fault_inject_*
  SampleLog* sample_log = nullptr;  // --log_samples (not owned; null: no log)
  ZeroRedundancyOptimizer* zero = nullptr;  // --zero: `optimizer` itself, sharded (not owned; null: off)
  AutoBucketCaps* auto_caps = nullptr;      // --bucket_cap_mb=auto, after every step (not owned; null: off)
  GradScaler* scaler = nullptr;             // --grad_scaler: loss scaling (not owned; null: off)
  int64_t skipped_steps = 0;                // --grad_scaler: steps skipped for inf/NaN gradients by this process
  // Where the epoch's global order stands after the last completed step (set when an epoch starts and
  // after every optimizer step): what an elastic regroup continues from (train/elastic_loop.h).
  SamplerState position;
  int member = -1;  // --elastic: this process's launch rank, which fault injection names (-1: use `rank`)
  // --elastic: whether this rank sees a replacement waiting to join, asked before each step (null: never).
  // When the ranks agree that one waits, the step loop ends after that step with kAborted and sets
  // `joiner_admitted`, and train/elastic_loop.h admits it (Note [Elastic join]).
  std::function<absl::StatusOr<bool>()> joiner_waiting;
  bool joiner_admitted = false;
  StepLoopOptions loop;
  // The training set: each epoch's start sets its epoch for the crops and flips it draws (not owned; null
  // in tests that train from another dataset).
  ImageDataset* train_images = nullptr;
};

// What one epoch did, for the end-of-epoch report.
struct EpochStats {
  int64_t steps = 0;           // optimizer steps this epoch
  double mean_loss = 0.0;      // rank 0's mean training loss
  double samples_per_s = 0.0;  // over all ranks
};

// Trains one epoch: sets the loader's sampler to `epoch` (SetEpoch, so a DistributedSampler draws the
// epoch's order, the same on every rank), then takes `loader`'s batches (this rank's shard) until the
// epoch ends or config.max_steps optimizer steps were taken in total. A loader error (naming the sample
// index) ends the epoch with that error. A SIGTERM (train/graceful_stop.h) ends it after the current
// step with kCancelled.
absl::StatusOr<EpochStats> TrainEpoch(TrainState& state, int epoch, DataLoader& loader);

// The loop of TrainEpoch without the epoch's set-up: `steps` optimizer steps of epoch `epoch`, each taking
// config.accumulate_steps batches from `batches` (fewer batches than that: an error), inside a Join with
// config.join under DDP, with the stop agreement, the optimizer, the sample log and the per-step work
// (bucket caps, checkpoints, desync check, injected faults), calling state.loop's observers. Every rank
// must call it with the same `steps` unless config.join.
absl::StatusOr<EpochStats> RunSteps(TrainState& state, int epoch, BatchSource& batches, int64_t steps);

// The loss scaler --grad_scaler asks for (GradScalerEnabled: on with --precision=fp16 by default), with
// the --grad_scaler_* options; null when it is off. REQUIRES: ValidateConfig(config) is OK.
std::unique_ptr<GradScaler> MakeGradScaler(const TrainConfig& config);

// --adapt_threads (Note [Adaptive kernel threads]): the observer that chooses each step's kernel thread
// count, appended to state.loop.observers and logging to stderr; null (nothing attached) when the flag is
// off. The caller keeps it alive while the loop runs.
std::unique_ptr<AdaptiveThreads> AttachAdaptiveThreads(const TrainConfig& config, TrainState& state);

// The learning rate of optimizer step `step` (0-based) of `total_steps`: during the first
// config.warmup_steps = W steps config.lr * (step + 1) / W (linear warmup); after them config.lr for
// "constant", config.lr * (1 + cos(pi * (step - W) / (total_steps - W))) / 2 for "cosine" (torch's
// CosineAnnealingLR over the remaining steps, eta_min 0, stepped per iteration). Pure.
double ScheduledLr(const TrainConfig& config, int64_t step, int64_t total_steps);

}  // namespace ddp

#endif  // DDP_TRAIN_TRAIN_STEP_H_
