// DataLoader benchmark against its performance targets, one JSON object on stdout:
//   {"loader_samples_per_s": ..., "loader_inline_samples_per_s": ..., "step_ms_premade": ...,
//    "step_ms_loader": ..., "loader_step_ratio": ...}
//   * loader_samples_per_s: --dataset (Fashion-MNIST by default), shuffled, batches of --batch_size through
//   one worker thread,
//     drained as fast as possible (target >= 50,000); "inline" is the same with num_workers = 0.
//   * step_ms_*: a cnn training step (forward, backward, SGD; --threads kernel threads) fed by the loader
//     (one worker) or by the same batches made beforehand, the two alternating step by step so that load
//     from other processes falls on both alike; the ratio's target is <= 1.05. Each figure (and the
//     ratio) is the best of --repeats runs of --steps steps per variant.
//
// --random_crop_padding and --random_flip draw train/train's crops and flips in the loader.
//
//   bazel run //bench:loader_bench -- --steps=200 --repeats=3
//   bazel-bin/bench/loader_bench --dataset=cifar10 --data_dir=DIR --random_crop_padding=4 --random_flip
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "data/data_loader.h"
#include "data/image_dataset_catalog.h"
#include "nn/models.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

ABSL_FLAG(std::string, dataset, "fashion_mnist", "fashion_mnist | mnist | cifar10 | cifar100");
ABSL_FLAG(std::string, data_dir, "", "the data set's folder (\"\": Fashion-MNIST's Debian folder)");
ABSL_FLAG(int64_t, random_crop_padding, 0, "train/train's --random_crop_padding");
ABSL_FLAG(bool, random_flip, false, "train/train's --random_flip");
ABSL_FLAG(int64_t, batch_size, 64, "samples per batch");
ABSL_FLAG(int, steps, 200, "timed training steps per run");
ABSL_FLAG(int, repeats, 3, "runs of the interleaved training comparison (the best counts)");
ABSL_FLAG(int, threads, 1, "kernel threads for the training step");
ABSL_FLAG(std::string, model, "cnn", "mlp | cnn | cnn_bn | resnet18");

namespace ddp {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "loader_bench: %s\n", status.ToString().c_str());
  return 1;
}

absl::StatusOr<std::unique_ptr<DataLoader>> MakeLoader(std::shared_ptr<const Dataset> data, int workers) {
  DataLoaderOptions options;
  options.batch_size = absl::GetFlag(FLAGS_batch_size);
  options.shuffle = true;
  options.num_workers = workers;
  return DataLoader::Create(std::move(data), nullptr, options);
}

// Samples per second of draining whole epochs (at least 0.5 s of them).
absl::StatusOr<double> LoaderThroughput(std::shared_ptr<const Dataset> data, int workers) {
  DDP_ASSIGN_OR_RETURN(auto loader, MakeLoader(std::move(data), workers));
  int64_t samples = 0;
  const absl::Time start = absl::Now();
  for (int epoch = 0; absl::Now() - start < absl::Milliseconds(500); ++epoch) {
    loader->sampler()->SetEpoch(epoch);
    DDP_RETURN_IF_ERROR(loader->Begin());
    while (true) {
      DDP_ASSIGN_OR_RETURN(std::optional<Example> batch, loader->Next());
      if (!batch) break;
      samples += batch->target.size(0);
    }
  }
  return samples / absl::ToDoubleSeconds(absl::Now() - start);
}

struct Trainer {
  std::shared_ptr<Module> model;
  std::unique_ptr<Sgd> optimizer;
  void Step(const Example& batch) {
    model->ZeroGrad();
    CrossEntropy(model->Forward(batch.input), batch.target).Backward();
    optimizer->Step();
  }
};

struct StepTimes {
  double premade_ms = 0;  // per step fed by a pre-made batch
  double loader_ms = 0;   // per step fed by the loader, Next() included
};

// Alternates the two variants step by step, so load from other processes on the machine falls on both
// alike: step(premade[i]), then step(loader.Next()), `steps` times each.
absl::StatusOr<StepTimes> InterleavedSteps(Trainer& trainer, DataLoader& loader, const std::vector<Example>& premade,
                                           int steps) {
  DDP_RETURN_IF_ERROR(loader.Begin());
  absl::Duration premade_total, loader_total;
  for (int i = 0; i < steps; ++i) {
    const absl::Time t0 = absl::Now();
    trainer.Step(premade[i % premade.size()]);
    const absl::Time t1 = absl::Now();
    DDP_ASSIGN_OR_RETURN(std::optional<Example> batch, loader.Next());
    if (!batch) {
      DDP_RETURN_IF_ERROR(loader.Begin());
      DDP_ASSIGN_OR_RETURN(batch, loader.Next());
    }
    trainer.Step(*batch);
    const absl::Time t2 = absl::Now();
    premade_total += t1 - t0;
    loader_total += t2 - t1;
  }
  return StepTimes{absl::ToDoubleMilliseconds(premade_total) / steps, absl::ToDoubleMilliseconds(loader_total) / steps};
}

int Run() {
  const std::string dataset = absl::GetFlag(FLAGS_dataset);
  auto info = FindImageDataset(dataset);
  if (!info.ok()) return Fail(info.status());
  auto train = LoadImageDataset(dataset, absl::GetFlag(FLAGS_data_dir), Split::kTrain);
  if (!train.ok()) return Fail(train.status());
  (*train)->set_augmentation(
      RandomCropFlip{absl::GetFlag(FLAGS_random_crop_padding), absl::GetFlag(FLAGS_random_flip), /*seed=*/0});
  std::shared_ptr<const Dataset> data = *train;
  auto with_worker = LoaderThroughput(data, 1);
  if (!with_worker.ok()) return Fail(with_worker.status());
  auto inline_loading = LoaderThroughput(data, 0);
  if (!inline_loading.ok()) return Fail(inline_loading.status());

  SetNumThreads(absl::GetFlag(FLAGS_threads));
  Generator generator(0);
  auto model =
      MakeModel(absl::GetFlag(FLAGS_model), generator, ModelInput{info->image_shape, info->num_classes});
  if (!model.ok()) return Fail(model.status());
  SgdOptions sgd;
  sgd.lr = 0.01f;
  sgd.momentum = 0.9f;
  Trainer trainer{*model, std::make_unique<Sgd>((*model)->Parameters(), sgd)};
  const int steps = absl::GetFlag(FLAGS_steps);
  // The pre-made batches are the loader's own first batches, collated up front.
  auto loader = MakeLoader(data, 1);
  if (!loader.ok()) return Fail(loader.status());
  std::vector<Example> premade;
  absl::Status status = (*loader)->Begin();
  while (status.ok() && static_cast<int>(premade.size()) < steps) {
    auto batch = (*loader)->Next();
    if (!batch.ok()) status = batch.status();
    if (!batch.ok() || !batch->has_value()) break;
    premade.push_back(**batch);
  }
  if (!status.ok()) return Fail(status);
  for (int i = 0; i < 10; ++i) trainer.Step(premade[i % premade.size()]);  // warm-up
  double best_premade = 1e30, best_loader = 1e30, best_ratio = 1e30;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    auto times = InterleavedSteps(trainer, **loader, premade, steps);
    if (!times.ok()) return Fail(times.status());
    best_premade = std::min(best_premade, times->premade_ms);
    best_loader = std::min(best_loader, times->loader_ms);
    best_ratio = std::min(best_ratio, times->loader_ms / times->premade_ms);
  }
  std::printf(
      "{\"batch_size\": %lld, \"loader_samples_per_s\": %.0f, \"loader_inline_samples_per_s\": %.0f, \"model\": \"%s\", "
      "\"threads\": %d, \"steps\": %d, \"step_ms_premade\": %.3f, \"step_ms_loader\": %.3f, \"loader_step_ratio\": %.3f}\n",
      static_cast<long long>(absl::GetFlag(FLAGS_batch_size)), *with_worker, *inline_loading,
      absl::GetFlag(FLAGS_model).c_str(), absl::GetFlag(FLAGS_threads), steps, best_premade, best_loader, best_ratio);
  return 0;
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ddp::Run();
}
