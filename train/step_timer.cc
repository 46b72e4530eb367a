#include "train/step_timer.h"

#include "absl/time/clock.h"

namespace ddp {

void StepTimer::StepBegan() {
  current_ = StepTime{};
  current_.began = phase_start_ = absl::Now();
}

void StepTimer::ForwardDone() {
  const absl::Time now = absl::Now();
  current_.forward += now - phase_start_;
  phase_start_ = now;
}

absl::Status StepTimer::BackwardDone() {
  const absl::Time now = absl::Now();
  current_.backward += now - phase_start_;
  phase_start_ = now;
  return absl::OkStatus();
}

void StepTimer::StepEnded() {
  current_.ended = absl::Now();
  current_.update = current_.ended - phase_start_;
  steps_.push_back(current_);
}

}  // namespace ddp
