// Note [Exact metric reduction]
// Each rank evaluates the samples r, r + W, ... (EvaluationSampler: no padding, so nothing is counted
// twice) and computes every sample's cross-entropy in double from its logits, so a sample's loss does
// not depend on which batch or rank it landed in. The four totals travel in ONE int64 all-reduce:
// correct, top-5 and count are exact integers, and the loss sum is sent in fixed point (units of 2^-32).
// Integer addition is associative, so the reduced totals do not depend on the reduction order or world size;
// the only difference from one process is the rounding of each rank's partial sum to 2^-32 (below
// 1e-9 per rank), far under float32's precision of the logits themselves.
#include "ddp/distributed_eval.h"

#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "data/data_loader.h"
#include "data/sampler.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

constexpr double kLossScale = 4294967296.0;  // 2^32: fixed-point units of the all-reduced loss sum

// One rank's share: per-sample predictions and losses, in its EvaluationSampler order.
struct LocalEval {
  std::vector<int64_t> predicted;
  std::vector<double> loss;
  std::vector<int64_t> labels;
  std::vector<uint8_t> in_top5;
};

// Cross-entropy of each row of `logits` [n, classes] against `labels`, in double.
void AppendRowLosses(const Tensor& logits, const std::vector<int64_t>& labels, LocalEval* out) {
  const Tensor rows = Contiguous(logits);
  const int64_t n = rows.size(0), classes = rows.size(1);
  const float* data = rows.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float* row = data + i * classes;
    double max = row[0];
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c) {
      if (row[c] > max) max = row[c], best = c;
    }
    double sum = 0;
    int64_t above_label = 0;  // logits strictly above the label's: its rank, ties in its favour
    for (int64_t c = 0; c < classes; ++c) {
      sum += std::exp(row[c] - max);
      above_label += row[c] > row[labels[i]];
    }
    out->loss.push_back(std::log(sum) + max - row[labels[i]]);
    out->predicted.push_back(best);
    out->labels.push_back(labels[i]);
    out->in_top5.push_back(above_label < 5);
  }
}

absl::StatusOr<LocalEval> EvaluateShard(Module& model, const Dataset& dataset, int rank, int world,
                                        const DistributedEvalOptions& options) {
  if (options.batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("eval batch_size must be >= 1, got ", options.batch_size));
  }
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<EvaluationSampler> sampler,
                       EvaluationSampler::Create(dataset.Size(), rank, world));
  DataLoaderOptions loader_options;
  loader_options.batch_size = options.batch_size;
  loader_options.num_workers = options.num_workers;
  // The loader lives only in this function; the caller's dataset outlives it.
  std::shared_ptr<const Dataset> borrowed(&dataset, [](const Dataset*) {});
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<DataLoader> loader,
                       DataLoader::Create(borrowed, std::move(sampler), loader_options));
  const bool was_training = model.is_training();
  model.Eval();
  NoGradGuard no_grad;
  // Batches go to the model's device; the logits come back for the (host) loss and argmax.
  const std::vector<Tensor> params = model.Parameters();
  const Device device = params.empty() ? Device::CPU() : params.front().device();
  LocalEval local;
  absl::Status status = loader->Begin();
  while (status.ok()) {
    absl::StatusOr<std::optional<Example>> batch = loader->Next();
    if (!batch.ok()) status = batch.status();
    if (!batch.ok() || !batch->has_value()) break;
    const Tensor logits = model.Forward(ToDevice((*batch)->input, device));
    AppendRowLosses(ToDevice(logits, Device::CPU()), (*batch)->target.ToVector<int64_t>(), &local);
  }
  model.Train(was_training);
  if (!status.ok()) return status;
  return local;
}

absl::Status BroadcastBuffersFromRankZero(Module& model, ProcessGroup& group) {
  for (const auto& [name, buffer] : model.NamedBuffers()) {
    absl::Status status = group.Broadcast(buffer, 0)->Wait(group.timeout());
    if (!status.ok()) return absl::Status(status.code(), absl::StrCat("broadcast of buffer ", name, ": ", status.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<LocalEval> EvaluateThisRank(Module& model, const Dataset& dataset, ProcessGroup* group,
                                           const DistributedEvalOptions& options) {
  if (group != nullptr && options.broadcast_buffers) DDP_RETURN_IF_ERROR(BroadcastBuffersFromRankZero(model, *group));
  return EvaluateShard(model, dataset, group != nullptr ? group->rank() : 0, group != nullptr ? group->size() : 1,
                       options);
}

EvalResult Totals(double loss_sum, int64_t correct, int64_t top5, int64_t count) {
  EvalResult result;
  result.count = count;
  result.loss = count > 0 ? loss_sum / count : 0.0;
  result.accuracy = count > 0 ? static_cast<double>(correct) / count : 0.0;
  result.top5_accuracy = count > 0 ? static_cast<double>(top5) / count : 0.0;
  return result;
}

template <typename T>
void AppendRaw(const std::vector<T>& values, std::string* out) {
  out->append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

}  // namespace

absl::StatusOr<EvalResult> EvaluateDistributed(Module& model, const Dataset& dataset, ProcessGroup* group,
                                               const DistributedEvalOptions& options) {
  DDP_ASSIGN_OR_RETURN(LocalEval local, EvaluateThisRank(model, dataset, group, options));
  double loss_sum = 0;
  int64_t correct = 0, top5 = 0;
  for (size_t i = 0; i < local.loss.size(); ++i) {
    loss_sum += local.loss[i];
    correct += local.predicted[i] == local.labels[i];
    top5 += local.in_top5[i];
  }
  if (!(std::abs(loss_sum) < 1e9)) {
    return absl::OutOfRangeError(absl::StrCat("evaluation loss sum ", loss_sum, " is not finite or too large to reduce"));
  }
  Tensor totals = Tensor::Empty({4}, DType::kInt64);
  int64_t* t = totals.data<int64_t>();
  t[0] = std::llround(loss_sum * kLossScale);
  t[1] = correct;
  t[2] = top5;
  t[3] = static_cast<int64_t>(local.loss.size());
  if (group != nullptr) {
    absl::Status status = group->AllReduceHost(totals, ReduceOp::kSum);
    if (!status.ok()) return absl::Status(status.code(), absl::StrCat("evaluation all-reduce: ", status.message()));
  }
  return Totals(static_cast<double>(t[0]) / kLossScale, t[1], t[2], t[3]);
}

absl::StatusOr<GatheredPredictions> GatherPredictions(Module& model, const Dataset& dataset, ProcessGroup* group,
                                                      const DistributedEvalOptions& options) {
  DDP_ASSIGN_OR_RETURN(LocalEval local, EvaluateThisRank(model, dataset, group, options));
  const int world = group != nullptr ? group->size() : 1;
  std::vector<std::string> shares(1);
  AppendRaw(local.predicted, &shares[0]);
  AppendRaw(local.loss, &shares[0]);
  AppendRaw(local.labels, &shares[0]);
  AppendRaw(local.in_top5, &shares[0]);
  if (group != nullptr) {
    const std::string mine = std::move(shares[0]);
    absl::Status status = group->AllGatherObject(mine, &shares);
    if (!status.ok()) return absl::Status(status.code(), absl::StrCat("prediction all-gather: ", status.message()));
  }
  const int64_t n = dataset.Size();
  GatheredPredictions out;
  out.predicted.resize(n);
  out.loss.resize(n);
  out.in_top5.resize(n);
  std::vector<int64_t> labels(n);
  constexpr size_t kBytesPerSample = 2 * sizeof(int64_t) + sizeof(double) + sizeof(uint8_t);
  for (int r = 0; r < world; ++r) {
    DDP_ASSIGN_OR_RETURN(auto sampler, EvaluationSampler::Create(n, r, world));
    const std::vector<int64_t> indices = sampler->EpochIndices();
    const std::string& bytes = shares[r];
    if (bytes.size() != indices.size() * kBytesPerSample) {
      return absl::DataLossError(absl::StrCat("predictions of rank ", r, ": ", bytes.size(), " bytes, expected ",
                                              indices.size() * kBytesPerSample, " (do all ranks hold the same dataset?)"));
    }
    const size_t m = indices.size();
    for (size_t k = 0; k < m; ++k) {
      std::memcpy(&out.predicted[indices[k]], bytes.data() + k * sizeof(int64_t), sizeof(int64_t));
      std::memcpy(&out.loss[indices[k]], bytes.data() + m * sizeof(int64_t) + k * sizeof(double), sizeof(double));
      std::memcpy(&labels[indices[k]], bytes.data() + m * (sizeof(int64_t) + sizeof(double)) + k * sizeof(int64_t),
                  sizeof(int64_t));
      out.in_top5[indices[k]] = static_cast<uint8_t>(bytes[m * (2 * sizeof(int64_t) + sizeof(double)) + k]);
    }
  }
  double loss_sum = 0;
  int64_t correct = 0, top5 = 0;
  for (int64_t i = 0; i < n; ++i) {
    loss_sum += out.loss[i];
    correct += out.predicted[i] == labels[i];
    top5 += out.in_top5[i];
  }
  out.result = Totals(loss_sum, correct, top5, n);
  return out;
}

}  // namespace ddp
