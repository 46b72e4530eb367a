// --resume in train/train: where a run continues from, and what it restores there.
#ifndef DDP_TRAIN_RESUME_H_
#define DDP_TRAIN_RESUME_H_

#include "absl/status/statusor.h"
#include "train/train_config.h"
#include "train/train_step.h"

namespace ddp {

// --resume: loads config.checkpoint_dir's newest complete checkpoint (FindNewestCheckpoint: dir/latest's,
// or found by scanning, which rank 0 says) into the model, the optimizer, DDP's bucket order (and, under
// --bucket_cap_mb=auto, its saved caps), the step count and the sampler position. Returns the epoch to
// start with. Under DDP every rank must continue from the same step of the same run: each rank's
// resume point (or its error) is compared in one exchange first, and a difference is named on every rank.
// Errors name the checkpoint and what in it could not be applied.
absl::StatusOr<int> ResumeFromNewest(const TrainConfig& config, TrainState& state);

}  // namespace ddp

#endif  // DDP_TRAIN_RESUME_H_
