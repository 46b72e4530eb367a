// StepTimer: the wall time of each step of the step loop and of its phases, as a StepObserver.
#ifndef DDP_TRAIN_STEP_TIMER_H_
#define DDP_TRAIN_STEP_TIMER_H_

#include <vector>

#include "absl/time/time.h"
#include "train/step_observer.h"

namespace ddp {

// One step's times. forward: from the step's start to the end of its last forward pass and loss, with
// the stop agreement's start and the zeroing of gradients (all micro-batches' forwards); backward: the
// backward passes (what DDP's hooks leave exposed included); update: from the last backward to the
// step's end (optimizer, stop agreement, bucket caps, checkpoint). total = forward + backward + update.
struct StepTime {
  absl::Time began;
  absl::Time ended;
  absl::Duration forward;
  absl::Duration backward;
  absl::Duration update;
  absl::Duration total() const { return ended - began; }
};

// Records a StepTime per step. Not thread-safe (the training thread only).
class StepTimer : public StepObserver {
 public:
  void StepBegan() override;
  void ForwardDone() override;
  absl::Status BackwardDone() override;
  void StepEnded() override;

  // The steps ended so far, in order.
  const std::vector<StepTime>& steps() const { return steps_; }

 private:
  StepTime current_;
  absl::Time phase_start_;
  std::vector<StepTime> steps_;
};

}  // namespace ddp

#endif  // DDP_TRAIN_STEP_TIMER_H_
