// The training loop behind examples/train: configuration, one epoch, evaluation and metrics.
#ifndef DDP_EXAMPLES_TRAINER_H_
#define DDP_EXAMPLES_TRAINER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "nn/module.h"

namespace ddp {

// Everything examples/train's flags set. Defaults are the documented hyper-parameters (README).
struct TrainConfig {
  std::string model = "cnn";        // mlp | cnn | cnn_bn
  int epochs = 5;
  int64_t batch_size = 64;
  double lr = 0.01;
  double momentum = 0.9;            // SGD only
  double weight_decay = 0.0;
  std::string optimizer = "sgd";    // sgd | adam | adamw
  uint64_t seed = 0;                // model initialisation and shuffling
  int threads = 1;                  // kernel threads
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t max_steps = 0;            // stop after this many steps in total (0: no limit)
  std::string metrics_out;          // JSON Lines, one object per epoch ("" = none)
  std::string save;                 // safetensors of the final weights ("" = none)
  std::string init_from;            // safetensors of initial weights ("" = random init)
  std::string dump_grads;           // safetensors of the first backward pass's gradients ("" = none)
  bool shuffle = true;              // false: samples in file order
  int64_t eval_batch_size = 1000;
};

// Loss and accuracy over a dataset.
struct EvalResult {
  double loss = 0.0;      // mean cross-entropy per sample
  double accuracy = 0.0;  // fraction of correct argmax predictions
  int64_t count = 0;
};

// Evaluates `model` (switched to eval mode, then back) on every sample of `dataset`, without recording
// the graph. Errors come from the dataset.
absl::StatusOr<EvalResult> Evaluate(Module& model, const Dataset& dataset, int64_t batch_size);

// Validates a configuration; the error names the bad flag (e.g. "--batch_size must be >= 1, got 0").
absl::Status ValidateConfig(const TrainConfig& config);

// Runs the whole training described by `config`: load data, build model and optimizer, train with a
// progress display on stderr, evaluate after each epoch, write metrics / weights / gradients. Returns
// the final test evaluation.
absl::StatusOr<EvalResult> RunTraining(const TrainConfig& config);

}  // namespace ddp

#endif  // DDP_EXAMPLES_TRAINER_H_
