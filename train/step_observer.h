// StepObserver: code that runs at the phase boundaries of each step of the step loop
// (train/train_step.h), for measuring the loop (StepTimer, train/step_timer.h) or adding to it without
// copying it (a benchmark's ablation). The loop calls every observer of TrainState::loop in order.
#ifndef DDP_TRAIN_STEP_OBSERVER_H_
#define DDP_TRAIN_STEP_OBSERVER_H_

#include "absl/status/status.h"

namespace ddp {

// The phases of one optimizer step, in the order the loop calls them: StepBegan, then per micro-batch
// ForwardDone and BackwardDone, then StepEnded after the optimizer and the per-step work (stop agreement,
// bucket caps, checkpoint). An error from BackwardDone fails the step with it. Called on the training
// thread only.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // Before the step's stop-agreement exchange and its gradients are zeroed.
  virtual void StepBegan() {}
  // After a micro-batch's forward pass and loss.
  virtual void ForwardDone() {}
  // After a micro-batch's backward pass (and, under DDP, its check of the Reducer's status).
  virtual absl::Status BackwardDone() { return absl::OkStatus(); }
  // After everything the loop does for this step.
  virtual void StepEnded() {}
};

}  // namespace ddp

#endif  // DDP_TRAIN_STEP_OBSERVER_H_
