// The training loop behind train/train: set-up, epochs, evaluation, metrics, checkpoints, and (when
// started by ddprun / torchrun / mpirun / srun with WORLD_SIZE > 1) DistributedDataParallel, or
// (--mode=dp) DataParallel in one process. The configuration is train/train_config.h's.
#ifndef DDP_TRAIN_TRAINER_H_
#define DDP_TRAIN_TRAINER_H_

#include "absl/status/statusor.h"
#include "ddp/distributed_eval.h"
#include "train/train_config.h"

namespace ddp {

// Runs the whole training described by `config` (invalid: ValidateConfig's error): probe every output
// path on rank 0 (train/output_guard.h), load data and check its images against the model's input
// shape, build model and optimizer (and DDP when distributed, DataParallel with --mode=dp), resume from
// the newest complete checkpoint (resume; FindNewestCheckpoint), refuse to overwrite newer checkpoints
// unless overwrite_checkpoints, train from a DistributedSampler through a DataLoader with a progress
// display on stderr (rank 0), checkpoint every checkpoint_every steps, evaluate after each epoch on every
// rank (EvaluateDistributed: the whole test set, equal to one process), write metrics / weights /
// gradients / trace. With eval_only, only evaluates init_from's weights (under any world size) and
// appends one metrics record. Returns the final test evaluation (the same on every rank; count 0 when
// the test set is empty: nothing was evaluated); when nothing is left to train (a resume at max_steps)
// the resumed weights are evaluated. A failure fails every rank at once; a SIGTERM ends the run after the
// current step with kCancelled. With --elastic, a process ddprun started as a replacement for a lost worker
// (DDP_ELASTIC_JOIN=1) joins no group at start but waits to be admitted into the running job
// (train/elastic_loop.h: RunElasticJoiner).
absl::StatusOr<EvalResult> RunTraining(const TrainConfig& config);

}  // namespace ddp

#endif  // DDP_TRAIN_TRAINER_H_
