#include "examples/trainer.h"

#include <cstdio>
#include <fstream>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "data/fashion_mnist.h"
#include "examples/progress.h"
#include "nn/adam.h"
#include "nn/models.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

namespace ddp {
namespace {

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const TrainConfig& config,
                                                         const std::vector<Tensor>& params) {
  if (config.optimizer == "sgd") {
    SgdOptions options;
    options.lr = config.lr;
    options.momentum = config.momentum;
    options.weight_decay = config.weight_decay;
    return std::unique_ptr<Optimizer>(new Sgd(params, options));
  }
  if (config.optimizer == "adam" || config.optimizer == "adamw") {
    AdamOptions options;
    options.lr = config.lr;
    options.weight_decay = config.weight_decay;
    options.decoupled_weight_decay = config.optimizer == "adamw";
    return std::unique_ptr<Optimizer>(new Adam(params, options));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--optimizer must be sgd, adam or adamw, got \"", config.optimizer, "\""));
}

// The order in which one epoch visits the training samples.
std::vector<int64_t> EpochOrder(int64_t size, bool shuffle, Generator& generator) {
  std::vector<int64_t> order(size);
  std::iota(order.begin(), order.end(), 0);
  if (shuffle) {
    for (int64_t i = size - 1; i > 0; --i) std::swap(order[i], order[generator.RandomIndex(i + 1)]);
  }
  return order;
}

absl::Status DumpGradients(const Module& model, const std::string& path) {
  NamedTensors grads;
  for (const auto& [name, param] : model.NamedParameters()) {
    if (param.grad().defined()) grads.emplace_back(name, param.grad());
  }
  return SaveSafetensors(path, grads, {{"content", "gradients of the first backward pass"}});
}

struct EpochStats {
  int64_t steps = 0;
  double mean_loss = 0.0;
  double samples_per_s = 0.0;
};

// Trains one epoch; stops early when the global step budget runs out.
absl::StatusOr<EpochStats> TrainEpoch(const TrainConfig& config, int epoch, Module& model, Optimizer& optimizer,
                                      const Dataset& train, Generator& shuffle_generator, int64_t* global_step) {
  const std::vector<int64_t> order = EpochOrder(train.Size(), config.shuffle, shuffle_generator);
  const int64_t batches = (train.Size() + config.batch_size - 1) / config.batch_size;
  int64_t steps = batches;
  if (config.max_steps > 0) steps = std::min(steps, config.max_steps - *global_step);
  ProgressReporter progress(stderr, absl::StrCat("epoch ", epoch), steps);
  model.Train();
  for (int64_t b = 0; b < steps; ++b) {
    const int64_t begin = b * config.batch_size;
    const int64_t end = std::min<int64_t>(begin + config.batch_size, train.Size());
    DDP_ASSIGN_OR_RETURN(Example batch,
                         train.GetBatch(std::vector<int64_t>(order.begin() + begin, order.begin() + end)));
    model.ZeroGrad();
    Tensor loss = CrossEntropy(model.Forward(batch.input), batch.target);
    loss.Backward();
    if (*global_step == 0 && !config.dump_grads.empty()) DDP_RETURN_IF_ERROR(DumpGradients(model, config.dump_grads));
    optimizer.Step();
    ++*global_step;
    progress.Step(end - begin, loss.item());
  }
  progress.Finish();
  return EpochStats{steps, progress.mean_loss(), progress.samples_per_second()};
}

absl::Status AppendMetrics(const std::string& path, const std::string& line) {
  std::ofstream out(path, std::ios::app);
  out << line << "\n";
  out.flush();
  if (!out.good()) return absl::UnavailableError(absl::StrCat("cannot write metrics to ", path));
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateConfig(const TrainConfig& config) {
  auto bad = [](const std::string& message) { return absl::InvalidArgumentError(message); };
  if (config.model != "mlp" && config.model != "cnn" && config.model != "cnn_bn") {
    return bad(absl::StrCat("--model must be mlp, cnn or cnn_bn, got \"", config.model, "\""));
  }
  if (config.epochs < 1) return bad(absl::StrCat("--epochs must be >= 1, got ", config.epochs));
  if (config.batch_size < 1) return bad(absl::StrCat("--batch_size must be >= 1, got ", config.batch_size));
  if (!(config.lr > 0)) return bad(absl::StrCat("--lr must be > 0, got ", config.lr));
  if (config.momentum < 0 || config.momentum >= 1) return bad(absl::StrCat("--momentum must be in [0, 1), got ", config.momentum));
  if (config.weight_decay < 0) return bad(absl::StrCat("--weight_decay must be >= 0, got ", config.weight_decay));
  if (config.optimizer != "sgd" && config.optimizer != "adam" && config.optimizer != "adamw") {
    return bad(absl::StrCat("--optimizer must be sgd, adam or adamw, got \"", config.optimizer, "\""));
  }
  if (config.threads < 1) return bad(absl::StrCat("--threads must be >= 1, got ", config.threads));
  if (config.max_steps < 0) return bad(absl::StrCat("--max_steps must be >= 0, got ", config.max_steps));
  return absl::OkStatus();
}

absl::StatusOr<EvalResult> Evaluate(Module& model, const Dataset& dataset, int64_t batch_size) {
  const bool was_training = model.is_training();
  model.Eval();
  NoGradGuard no_grad;
  EvalResult result;
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (int64_t begin = 0; begin < dataset.Size(); begin += batch_size) {
    const int64_t end = std::min(begin + batch_size, dataset.Size());
    std::vector<int64_t> indices(end - begin);
    std::iota(indices.begin(), indices.end(), begin);
    DDP_ASSIGN_OR_RETURN(Example batch, dataset.GetBatch(indices));
    Tensor logits = model.Forward(batch.input);
    loss_sum += CrossEntropy(logits, batch.target).item() * (end - begin);
    std::vector<int64_t> predicted = Argmax(logits, 1).ToVector<int64_t>();
    std::vector<int64_t> labels = batch.target.ToVector<int64_t>();
    for (size_t i = 0; i < labels.size(); ++i) correct += predicted[i] == labels[i];
  }
  model.Train(was_training);
  result.count = dataset.Size();
  result.loss = result.count > 0 ? loss_sum / result.count : 0.0;
  result.accuracy = result.count > 0 ? static_cast<double>(correct) / result.count : 0.0;
  return result;
}

absl::StatusOr<EvalResult> RunTraining(const TrainConfig& config) {
  DDP_RETURN_IF_ERROR(ValidateConfig(config));
  SetNumThreads(config.threads);
  DDP_ASSIGN_OR_RETURN(auto train, LoadFashionMnist(config.data_dir, Split::kTrain));
  DDP_ASSIGN_OR_RETURN(auto test, LoadFashionMnist(config.data_dir, Split::kTest));
  Generator init_generator(config.seed);
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<Module> model, MakeModel(config.model, init_generator));
  if (!config.init_from.empty()) DDP_RETURN_IF_ERROR(LoadModuleFromSafetensors(*model, config.init_from));
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, MakeOptimizer(config, model->Parameters()));
  Generator shuffle_generator(config.seed + 1);
  int64_t global_step = 0;
  EvalResult last;
  const absl::Time start = absl::Now();
  for (int epoch = 1; epoch <= config.epochs; ++epoch) {
    if (config.max_steps > 0 && global_step >= config.max_steps) break;
    DDP_ASSIGN_OR_RETURN(EpochStats stats,
                         TrainEpoch(config, epoch, *model, *optimizer, *train, shuffle_generator, &global_step));
    DDP_ASSIGN_OR_RETURN(last, Evaluate(*model, *test, config.eval_batch_size));
    const double wall = absl::ToDoubleSeconds(absl::Now() - start);
    std::fprintf(stderr, "epoch %d: train_loss %.4f test_loss %.4f test_acc %.4f (%.0f samples/s, %s)\n", epoch,
                 stats.mean_loss, last.loss, last.accuracy, stats.samples_per_s, FormatDuration(wall).c_str());
    if (!config.metrics_out.empty()) {
      DDP_RETURN_IF_ERROR(AppendMetrics(
          config.metrics_out,
          absl::StrFormat("{\"epoch\": %d, \"steps\": %d, \"train_loss\": %.6f, \"test_loss\": %.6f, "
                          "\"test_acc\": %.6f, \"samples_per_s\": %.1f, \"wall_s\": %.3f}",
                          epoch, stats.steps, stats.mean_loss, last.loss, last.accuracy, stats.samples_per_s, wall)));
    }
  }
  if (!config.save.empty()) DDP_RETURN_IF_ERROR(SaveModuleToSafetensors(*model, config.save));
  return last;
}

}  // namespace ddp
