// Numbers that cannot train are errors (Note [Non-finite loss] in finite_checks.cc): a training loss
// that is NaN or infinite stops the run on every rank, naming the step and the likely cause, and weights
// that hold NaN or infinity are never trained from, checkpointed or saved.
//
// Example (the step loop, train/train_step.cc):
//   LossWatch watch(state.global_step);
//   ...after each optimizer step: watch.Observe(state.global_step, loss, rank);
//   ...after the loop: DDP_RETURN_IF_ERROR(AgreeLossesFinite(group, config, watch));
//
// Thread safety: LossWatch is the training thread's; the functions share no state.
#ifndef DDP_TRAIN_FINITE_CHECKS_H_
#define DDP_TRAIN_FINITE_CHECKS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "comm/process_group.h"
#include "nn/module.h"
#include "train/train_config.h"

namespace ddp {

// The first non-finite training loss one rank saw, and the last finite one before it.
class LossWatch {
 public:
  // `start_step`: the optimizer steps taken before this run of the loop (0, or where --resume took it).
  explicit LossWatch(int64_t start_step) : start_step_(start_step) {}

  // Records the loss of optimizer step `step` (1-based, the global step count after it) on `rank`; the
  // first non-finite one trips the watch (later ones are ignored).
  void Observe(int64_t step, double loss, int rank);
  // Whether a non-finite loss was seen.
  bool tripped() const { return bad_step_ > 0; }
  // The step of the first non-finite loss (0 when none).
  int64_t bad_step() const { return bad_step_; }

  // The error for the first non-finite loss (REQUIRES: tripped()): FailedPrecondition naming the step,
  // the value, the rank and the likely cause, e.g.
  //   the training loss is nan at step 2 (rank 0), so training stopped on every rank: the learning rate
  //   is likely too high (--lr=1e+30; the loss was 2.3026 at step 1): lower it, or add --warmup_steps or
  //   --clip_grad_norm
  // At the run's first step (nothing updated yet; the trainer checks the starting weights are finite)
  // the cause named is the weights overflowing on the data.
  // `world_size` 1 leaves the ranks out of it ("so training stopped").
  absl::Status Error(const TrainConfig& config, int world_size) const;

  // The tripped watch as text for the exchange (AgreeLossesFinite), and back.
  std::string Encode() const;
  static absl::Status Decode(const std::string& text, LossWatch* watch);

 private:
  int64_t start_step_;
  int64_t bad_step_ = 0;   // the step of the first non-finite loss; 0: none
  double bad_loss_ = 0;    // its value
  int bad_rank_ = 0;       // the rank that saw it
  int64_t good_step_ = 0;  // the last step with a finite loss before it (0: none)
  double good_loss_ = 0;   // its value
};

// Whether any rank's watch tripped, agreed by every rank: under DDP (`group` not null) one
// AllGatherObject, then on every rank the same error for the earliest non-finite loss (lowest step, then
// lowest rank); in one process `watch`'s own error. OK when no loss was non-finite. Collective.
absl::Status AgreeLossesFinite(ProcessGroup* group, const TrainConfig& config, const LossWatch& watch);

// The name of the first parameter or buffer of `module` (StateDict order) that holds NaN or infinity, or
// "" when every one is finite. Floating-point tensors only; device tensors are copied to the host.
std::string FirstNonFiniteTensor(const Module& module);

// OK when every parameter and buffer of `module` is finite; otherwise FailedPrecondition
// "<what>: the weights hold NaN or infinity (<tensor>)", e.g. what = "not saving --save=/out/w".
absl::Status RequireFiniteWeights(const Module& module, absl::string_view what);

}  // namespace ddp

#endif  // DDP_TRAIN_FINITE_CHECKS_H_
