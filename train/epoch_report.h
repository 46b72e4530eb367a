// What the train program reports after each epoch: one stderr line and one --metrics_out JSON record,
// with the test metrics, the speed and the process's peak memory.
#ifndef DDP_TRAIN_EPOCH_REPORT_H_
#define DDP_TRAIN_EPOCH_REPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "comm/process_group.h"
#include "ddp/distributed_eval.h"
#include "train/train_config.h"
#include "train/train_step.h"

namespace ddp {

// One epoch's figures besides the evaluation.
struct EpochFigures {
  int epoch = 0;
  EpochStats stats;     // the training loop's
  double wall_s = 0.0;  // since the run's first epoch began
  int world_size = 1;
  int64_t training_peak_rss = 0;  // this process's peak RSS in bytes when the epoch's training ended
  int64_t peak_rss = 0;           // ... and after its evaluation
};

// The test metrics of a --metrics_out record: `"test_loss": x, "test_acc": y, "test_acc5": z` (z: top-5
// accuracy), or nulls when there was nothing to evaluate (never a made-up number).
std::string TestMetricsJson(const EvalResult& eval);

// The test metrics of a printed line: "test_loss x test_acc y", and " test_acc5 z" when the model scores
// more than 10 classes (CIFAR-100), where top-5 accuracy is what recipes report beside top-1.
// REQUIRES: eval.count > 0.
std::string TestMetricsText(const TrainConfig& config, const EvalResult& eval);

// On rank 0 (every rank calls it; `group` null in one process): prints
//   epoch 1: train_loss 0.5261 test_loss 0.4308 test_acc 0.8452 (8400 samples/s, 7s; peak RSS 286.1 MiB,
//   training 284.0 MiB)
// and appends the JSON record to config.metrics_out when set (peak_rss_mb and training_peak_rss_mb are
// rank 0's). An append error reaches every rank (RunOnRankZero).
absl::Status ReportEpoch(const TrainConfig& config, const EpochFigures& figures, const EvalResult& eval,
                         ProcessGroup* group);

}  // namespace ddp

#endif  // DDP_TRAIN_EPOCH_REPORT_H_
