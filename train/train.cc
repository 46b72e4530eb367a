// train/train: trains mlp / cnn / cnn_bn on Fashion-MNIST, in one process or, under ddprun (or
// torchrun-style variables with WORLD_SIZE > 1), with DistributedDataParallel.
//
//   bazel-bin/train/train --model=cnn --epochs=5
//   bazel-bin/launch/ddprun --nproc_per_node=2 bazel-bin/train/train --model=cnn
//   bazel-bin/launch/ddprun --nproc_per_node=3 bazel-bin/train/train --eval_only --init_from=w.safetensors
//
// Flags, defaults and their rules: the table train/train_flags.def (`train --help` lists them).
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "comm/init.h"
#include "train/graceful_stop.h"
#include "train/train_config.h"
#include "train/trainer.h"

// One absl flag per row of train/train_flags.def, with the row's default and help. (absl flags give
// --help, --flagfile, typed parsing and the "unknown flag" error; the table only has to list the flags.)
#define DDP_TRAIN_FLAG(type, name, default_value, rule, help) ABSL_FLAG(type, name, default_value, help);
#include "train/train_flags.def"
#undef DDP_TRAIN_FLAG

namespace {

// The parsed flags, as a TrainConfig.
ddp::TrainConfig ConfigFromFlags() {
  ddp::TrainConfig config;
#define DDP_TRAIN_FLAG(type, name, default_value, rule, help) config.name = absl::GetFlag(FLAGS_##name);
#include "train/train_flags.def"
#undef DDP_TRAIN_FLAG
  return config;
}

// --help and --helpshort list the flags of the table. (absl's default looks for flags defined in
// train.cc, but ABSL_FLAG records the file its expansion sits in: train_flags.def.)
void HelpShowsTheTable() {
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) { return absl::EndsWith(file, "train_flags.def"); };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
}

}  // namespace

int main(int argc, char** argv) {
  ddp::InstallGracefulStop();  // before any thread starts (train/graceful_stop.h)
  absl::SetProgramUsageMessage("Trains a model on Fashion-MNIST. Example: train --model=cnn --epochs=5");
  HelpShowsTheTable();
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "train: unexpected argument \"%s\" (flags are --name=value)\n", positional[1]);
    return 2;
  }
  const ddp::TrainConfig config = ConfigFromFlags();
  if (absl::Status valid = ddp::ValidateConfig(config); !valid.ok()) {
    std::fprintf(stderr, "train: usage error: %s\n", std::string(valid.message()).c_str());
    return 2;
  }
  absl::StatusOr<ddp::EvalResult> result = ddp::RunTraining(config);
  if (!result.ok()) {
    std::fprintf(stderr, "train: %s\n", result.status().ToString().c_str());
    return absl::IsCancelled(result.status()) ? 128 + SIGTERM : 1;  // the agreed stop (Note [Stop agreement])
  }
  // Every rank holds the same (distributed) evaluation; rank 0 reports it.
  absl::StatusOr<ddp::LaunchEnv> launch = ddp::ResolveLaunchEnv(ddp::ProcessEnv());
  if (launch.ok() && launch->rank == 0) {
    if (result->count == 0) {
      std::printf("final: nothing evaluated (the test set is empty)\n");  // never a made-up number
    } else {
      std::printf("final test_acc %.4f test_loss %.4f\n", result->accuracy, result->loss);
    }
  }
  return 0;
}
