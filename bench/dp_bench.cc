// DataParallel throughput on CPU workers: one process, the model trained with SGD on a fixed
// synthetic batch (compute does not depend on the pixel values, and no data loader runs in the loop),
// in several modes measured in interleaved rounds so that background load hits them alike:
//   single          the plain module on one thread with --threads kernel threads (the baseline)
//   single_omp      the plain module with --workers kernel threads (intra-op parallelism, for context)
//   dp              DataParallel over --workers CPU workers, parallel backward (the default)
//   dp_seq_backward DataParallel whose backward walks every replica on the caller's thread
//                   (parallel_backward = false; Note [DataParallel autograd])
// With --precision=bf16 every mode runs its forward and loss under a bf16 AutocastScope (DataParallel's
// workers enter it too: dp/data_parallel.h). Prints one JSON object per mode (median over rounds) and the
// speed-ups against `single`.
//
//   bazel run //bench:dp_bench -- --model=cnn --batch_size=128 --workers=2 [--precision=bf16]
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/statistics.h"
#include "dp/data_parallel.h"
#include "nn/models.h"
#include "nn/sgd.h"
#include "tensor/autocast.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

ABSL_FLAG(std::string, model, "cnn", "mlp | cnn | cnn_bn | resnet18");
ABSL_FLAG(int64_t, batch_size, 128, "samples per step (the whole batch, split over the workers)");
ABSL_FLAG(int, workers, 2, "DataParallel CPU workers");
ABSL_FLAG(int, threads, 1, "kernel threads of the baseline and of each worker");
ABSL_FLAG(int, steps, 20, "timed steps per round and mode");
ABSL_FLAG(int, rounds, 5, "interleaved rounds (each mode once per round); medians are reported");
ABSL_FLAG(int, warmup, 3, "untimed steps per mode before the rounds");
ABSL_FLAG(std::string, modes, "single,single_omp,dp,dp_seq_backward", "comma-separated modes to run");
ABSL_FLAG(std::string, precision, "fp32", "fp32 | bf16 (forward and loss under bf16 autocast)");

namespace ddp {
namespace {

struct Timing {
  double step_ms = 0, forward_ms = 0, backward_ms = 0;
};

struct Runner {
  std::shared_ptr<Module> model;
  std::shared_ptr<DataParallel> dp;  // null: plain module
  std::unique_ptr<Sgd> optimizer;
  int kernel_threads = 1;            // the caller thread's kernel threads in this mode
  bool bf16 = false;                 // forward and loss under bf16 autocast

  // `steps` SGD steps on (x, y); mean per-step times.
  Timing Run(const Tensor& x, const Tensor& y, int steps) {
    SetNumThreads(kernel_threads);
    Module& net = dp != nullptr ? static_cast<Module&>(*dp) : *model;
    absl::Duration forward, backward;
    const absl::Time start = absl::Now();
    for (int i = 0; i < steps; ++i) {
      model->ZeroGrad();
      const absl::Time t0 = absl::Now();
      Tensor loss;
      {
        std::optional<AutocastScope> autocast;
        if (bf16) autocast.emplace(true, DType::kBFloat16);
        loss = CrossEntropy(net.Forward(x), y);
      }
      const absl::Time t1 = absl::Now();
      loss.Backward();
      backward += absl::Now() - t1;
      forward += t1 - t0;
      optimizer->Step();
    }
    const double total = absl::ToDoubleMilliseconds(absl::Now() - start);
    return {total / steps, absl::ToDoubleMilliseconds(forward) / steps, absl::ToDoubleMilliseconds(backward) / steps};
  }
};

absl::StatusOr<Runner> MakeRunner(const std::string& mode, int workers, int threads) {
  Generator generator(0);
  Runner runner;
  DDP_ASSIGN_OR_RETURN(runner.model, MakeModel(absl::GetFlag(FLAGS_model), generator));
  runner.kernel_threads = mode == "single_omp" ? workers : threads;
  const std::string precision = absl::GetFlag(FLAGS_precision);
  if (precision != "fp32" && precision != "bf16") {
    return absl::InvalidArgumentError("--precision must be fp32 or bf16, got \"" + precision + "\"");
  }
  runner.bf16 = precision == "bf16";
  if (mode == "dp" || mode == "dp_seq_backward") {
    DataParallelOptions options;
    for (int i = 0; i < workers; ++i) options.device_ids.push_back(i);
    options.kernel_threads_per_worker = threads;
    options.parallel_backward = mode == "dp";
    DDP_ASSIGN_OR_RETURN(runner.dp, DataParallel::Create(runner.model, options));
  } else if (mode != "single" && mode != "single_omp") {
    return absl::InvalidArgumentError("unknown mode \"" + mode + "\"");
  }
  SgdOptions sgd;
  sgd.lr = 0.01f;
  sgd.momentum = 0.9f;
  runner.optimizer = std::make_unique<Sgd>(runner.model->Parameters(), sgd);
  return runner;
}


int Main() {
  const int64_t batch_size = absl::GetFlag(FLAGS_batch_size);
  const int workers = absl::GetFlag(FLAGS_workers), threads = absl::GetFlag(FLAGS_threads);
  const std::vector<std::string> modes = absl::StrSplit(absl::GetFlag(FLAGS_modes), ',');
  Generator data(7);
  std::vector<int64_t> labels(batch_size);
  for (auto& l : labels) l = static_cast<int64_t>(data.RandomIndex(10));
  const Tensor x = Normal({batch_size, 1, 28, 28}, 0.0f, 1.0f, data), y = FromVector(labels, {batch_size});
  std::map<std::string, Runner> runners;
  for (const std::string& mode : modes) {
    absl::StatusOr<Runner> runner = MakeRunner(mode, workers, threads);
    if (!runner.ok()) {
      std::fprintf(stderr, "dp_bench: %s\n", runner.status().ToString().c_str());
      return 2;
    }
    runner->Run(x, y, absl::GetFlag(FLAGS_warmup));
    runners.emplace(mode, std::move(*runner));
  }
  std::map<std::string, std::vector<Timing>> timings;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (const std::string& mode : modes) timings[mode].push_back(runners[mode].Run(x, y, absl::GetFlag(FLAGS_steps)));
  }
  std::map<std::string, double> samples_per_s;
  for (const std::string& mode : modes) {
    std::vector<double> step, forward, backward;
    for (const Timing& t : timings[mode]) {
      step.push_back(t.step_ms);
      forward.push_back(t.forward_ms);
      backward.push_back(t.backward_ms);
    }
    samples_per_s[mode] = 1000.0 * batch_size / Median(step);
    std::printf(
        "{\"mode\": \"%s\", \"model\": \"%s\", \"precision\": \"%s\", \"batch_size\": %ld, \"workers\": %d, "
        "\"kernel_threads\": %d, \"samples_per_s\": %.1f, \"step_ms\": %.2f, \"forward_ms\": %.2f, "
        "\"backward_ms\": %.2f}\n",
        mode.c_str(), absl::GetFlag(FLAGS_model).c_str(), absl::GetFlag(FLAGS_precision).c_str(),
        static_cast<long>(batch_size), mode.rfind("dp", 0) == 0 ? workers : 1, runners[mode].kernel_threads,
        samples_per_s[mode], Median(step), Median(forward), Median(backward));
  }
  if (samples_per_s.count("single") != 0) {
    for (const std::string& mode : modes) {
      if (mode != "single") std::printf("speedup %s / single: %.2fx\n", mode.c_str(), samples_per_s[mode] / samples_per_s["single"]);
    }
  }
  return 0;
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ddp::Main();
}
