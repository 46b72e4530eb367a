// examples/train: trains mlp / cnn / cnn_bn on Fashion-MNIST.
//
//   bazel run //examples:train -- --model=cnn --epochs=5
//
// Flags and defaults: examples/trainer.h (TrainConfig) and README.md.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "examples/trainer.h"

namespace {
const ddp::TrainConfig kDefaults;
}  // namespace

ABSL_FLAG(std::string, model, kDefaults.model, "mlp | cnn | cnn_bn");
ABSL_FLAG(int, epochs, kDefaults.epochs, "number of passes over the training set");
ABSL_FLAG(int64_t, batch_size, kDefaults.batch_size, "samples per step");
ABSL_FLAG(double, lr, kDefaults.lr, "learning rate");
ABSL_FLAG(double, momentum, kDefaults.momentum, "SGD momentum");
ABSL_FLAG(double, weight_decay, kDefaults.weight_decay, "L2 penalty (decoupled for adamw)");
ABSL_FLAG(std::string, optimizer, kDefaults.optimizer, "sgd | adam | adamw");
ABSL_FLAG(uint64_t, seed, kDefaults.seed, "seed for initialisation and shuffling");
ABSL_FLAG(int, threads, kDefaults.threads, "CPU threads for the kernels");
ABSL_FLAG(std::string, data_dir, kDefaults.data_dir, "folder with the Fashion-MNIST IDX files");
ABSL_FLAG(int64_t, max_steps, kDefaults.max_steps, "stop after this many steps (0: no limit)");
ABSL_FLAG(std::string, metrics_out, "", "append one JSON line per epoch to this file");
ABSL_FLAG(std::string, save, "", "write the final weights to this safetensors file");
ABSL_FLAG(std::string, init_from, "", "load initial weights from this safetensors file");
ABSL_FLAG(std::string, dump_grads, "", "write the first backward pass's gradients to this safetensors file");
ABSL_FLAG(bool, shuffle, kDefaults.shuffle, "shuffle the training set each epoch (false: file order)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Trains a model on Fashion-MNIST. Example: train --model=cnn --epochs=5");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "train: unexpected argument \"%s\" (flags are --name=value)\n", positional[1]);
    return 2;
  }
  ddp::TrainConfig config;
  config.model = absl::GetFlag(FLAGS_model);
  config.epochs = absl::GetFlag(FLAGS_epochs);
  config.batch_size = absl::GetFlag(FLAGS_batch_size);
  config.lr = absl::GetFlag(FLAGS_lr);
  config.momentum = absl::GetFlag(FLAGS_momentum);
  config.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  config.optimizer = absl::GetFlag(FLAGS_optimizer);
  config.seed = absl::GetFlag(FLAGS_seed);
  config.threads = absl::GetFlag(FLAGS_threads);
  config.data_dir = absl::GetFlag(FLAGS_data_dir);
  config.max_steps = absl::GetFlag(FLAGS_max_steps);
  config.metrics_out = absl::GetFlag(FLAGS_metrics_out);
  config.save = absl::GetFlag(FLAGS_save);
  config.init_from = absl::GetFlag(FLAGS_init_from);
  config.dump_grads = absl::GetFlag(FLAGS_dump_grads);
  config.shuffle = absl::GetFlag(FLAGS_shuffle);
  if (absl::Status valid = ddp::ValidateConfig(config); !valid.ok()) {
    std::fprintf(stderr, "train: usage error: %s\n", std::string(valid.message()).c_str());
    return 2;
  }
  absl::StatusOr<ddp::EvalResult> result = ddp::RunTraining(config);
  if (!result.ok()) {
    std::fprintf(stderr, "train: %s\n", result.status().ToString().c_str());
    return 1;
  }
  std::printf("final test_acc %.4f test_loss %.4f\n", result->accuracy, result->loss);
  return 0;
}
