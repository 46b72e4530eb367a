// Single-process training throughput with pre-loaded data (no loader in the loop), the C++ side of
// bench/compare_train.sh. Prints one JSON object:
//   {"impl": "ddpengine", "model", "batch_size", "steps", "samples_per_s", "step_ms", "peak_rss_mb",
//    "world_size": 1, "forward_ms", "backward_ms", "step_ms_optimizer"}
//
//   bazel run //bench:train_throughput -- --model=cnn --batch_size=64 --steps=200 --threads=1
#include <sys/resource.h>

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "data/fashion_mnist.h"
#include "nn/models.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

ABSL_FLAG(std::string, model, "cnn", "mlp | cnn | cnn_bn");
ABSL_FLAG(int64_t, batch_size, 64, "samples per step");
ABSL_FLAG(int, steps, 200, "timed steps");
ABSL_FLAG(int, warmup, 20, "untimed steps first");
ABSL_FLAG(int, threads, 1, "kernel threads");
ABSL_FLAG(std::string, data_dir, ddp::kDefaultFashionMnistDir, "Fashion-MNIST folder");

namespace ddp {
namespace {

double PeakRssMb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

int Run() {
  SetNumThreads(absl::GetFlag(FLAGS_threads));
  const int64_t batch_size = absl::GetFlag(FLAGS_batch_size);
  auto train = LoadFashionMnist(absl::GetFlag(FLAGS_data_dir), Split::kTrain);
  if (!train.ok()) {
    std::fprintf(stderr, "%s\n", train.status().ToString().c_str());
    return 1;
  }
  Generator generator(0);
  auto model = MakeModel(absl::GetFlag(FLAGS_model), generator);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 2;
  }
  SgdOptions options;
  options.lr = 0.01;
  options.momentum = 0.9;
  Sgd optimizer((*model)->Parameters(), options);
  // The same 64 pre-made batches as bench/pytorch_reference.py, cycled.
  std::vector<Example> batches;
  for (int64_t b = 0; b < 64; ++b) {
    std::vector<int64_t> indices(batch_size);
    for (int64_t i = 0; i < batch_size; ++i) indices[i] = b * batch_size + i;
    batches.push_back(*(*train)->GetBatch(indices));
  }
  const int warmup = absl::GetFlag(FLAGS_warmup), steps = absl::GetFlag(FLAGS_steps);
  absl::Duration forward, backward, update;
  absl::Time start;
  for (int i = 0; i < warmup + steps; ++i) {
    if (i == warmup) {
      start = absl::Now();
      forward = backward = update = absl::ZeroDuration();
    }
    const Example& batch = batches[i % batches.size()];
    const absl::Time t0 = absl::Now();
    (*model)->ZeroGrad();
    Tensor loss = CrossEntropy((*model)->Forward(batch.input), batch.target);
    const absl::Time t1 = absl::Now();
    loss.Backward();
    const absl::Time t2 = absl::Now();
    optimizer.Step();
    update += absl::Now() - t2;
    forward += t1 - t0;
    backward += t2 - t1;
  }
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf(
      "{\"impl\": \"ddpengine\", \"model\": \"%s\", \"batch_size\": %d, \"steps\": %d, \"world_size\": 1, "
      "\"samples_per_s\": %.1f, \"step_ms\": %.3f, \"peak_rss_mb\": %.1f, \"forward_ms\": %.3f, "
      "\"backward_ms\": %.3f, \"optimizer_ms\": %.3f}\n",
      absl::GetFlag(FLAGS_model), batch_size, steps, steps * batch_size / elapsed, 1000.0 * elapsed / steps,
      PeakRssMb(), absl::ToDoubleMilliseconds(forward) / steps, absl::ToDoubleMilliseconds(backward) / steps,
      absl::ToDoubleMilliseconds(update) / steps);
  return 0;
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ddp::Run();
}
