// Training progress output: a live one-line bar on a terminal, plain periodic lines otherwise.
#ifndef DDP_TRAIN_PROGRESS_H_
#define DDP_TRAIN_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ddp {

// Reports step, loss, samples/s and ETA for one epoch. Not thread-safe (the training thread owns it).
class ProgressReporter {
 public:
  // `out` is not owned; null counts without printing. When `out` is a terminal the bar is redrawn in
  // place (at most 10 times a second); otherwise a plain line is printed every `plain_every` steps and at the end.
  ProgressReporter(FILE* out, std::string label, int64_t total_steps, int64_t plain_every = 100);

  // Records a finished step that processed `samples` samples with loss `loss`.
  void Step(int64_t samples, double loss);
  // Ends the epoch's line (a newline after the bar).
  void Finish();

  double mean_loss() const { return steps_ == 0 ? 0.0 : loss_sum_ / steps_; }
  double samples_per_second() const;

 private:
  void Print(bool final_line);

  FILE* out_;
  std::string label_;
  int64_t total_steps_;
  int64_t plain_every_;
  bool is_terminal_;
  int64_t steps_ = 0;
  int64_t samples_ = 0;
  double loss_sum_ = 0.0;
  double last_loss_ = 0.0;
  absl::Time start_;
  absl::Time last_draw_;
};

// "1m05s", "3.2s".
std::string FormatDuration(double seconds);

}  // namespace ddp

#endif  // DDP_TRAIN_PROGRESS_H_
