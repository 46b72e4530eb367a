// The training loop behind examples/train: set-up, epochs, evaluation, metrics, checkpoints, and (when
// started by ddprun / torchrun / mpirun / srun with WORLD_SIZE > 1) DistributedDataParallel, or
// (--mode=dp) DataParallel in one process. The configuration is examples/train_config.h's.
#ifndef DDP_EXAMPLES_TRAINER_H_
#define DDP_EXAMPLES_TRAINER_H_

#include "absl/status/statusor.h"
#include "ddp/distributed_eval.h"
#include "examples/train_config.h"

namespace ddp {

// Runs the whole training described by `config` (invalid: ValidateConfig's error): load data, build
// model and optimizer (and DDP when distributed, DataParallel with --mode=dp), resume from the latest
// checkpoint (resume), train from a DistributedSampler through a DataLoader with a progress display on
// stderr (rank 0), checkpoint every checkpoint_every steps, evaluate after each epoch on every rank
// (EvaluateDistributed: the whole test set, equal to one process), write metrics / weights / gradients
// / trace. With eval_only, only evaluates init_from's weights (under any world size). Returns the final
// test evaluation (the same on every rank); a SIGTERM ends it after the current step with kCancelled.
absl::StatusOr<EvalResult> RunTraining(const TrainConfig& config);

}  // namespace ddp

#endif  // DDP_EXAMPLES_TRAINER_H_
