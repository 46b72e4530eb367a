// Test-only helpers shared by the Reducer's tests: a tiny model as raw leaves, deterministic batches and
// their per-rank shards, a relative-error measure, an observer that logs the Reducer's events, and one
// synchronised iteration.
#ifndef DDP_REDUCER_REDUCER_TEST_UTIL_H_
#define DDP_REDUCER_REDUCER_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "reducer/reducer.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace ddp {
// A two-layer MLP as raw leaves: fc1 [8, 4] + [8], fc2 [3, 8] + [3], plus an optional extra head.
struct TinyModel {
  std::vector<Tensor> params;
  std::vector<std::string> names = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "extra.weight"};

  explicit TinyModel(uint64_t seed) {
    Generator g(seed);
    for (const Shape& shape : {Shape{8, 4}, Shape{8}, Shape{3, 8}, Shape{3}, Shape{3, 8}}) {
      Tensor p = Uniform(shape, -0.5f, 0.5f, g);
      p.set_requires_grad(true);
      params.push_back(p);
    }
    for (size_t i = 0; i < params.size(); ++i) params[i].set_name(names[i]);
  }
  // use_extra: whether the extra head contributes to the output.
  Tensor Loss(const Tensor& x, const Tensor& y, bool use_extra) const {
    Tensor h = Relu(Linear(x, params[0], params[1]));
    Tensor logits = Linear(h, params[2], params[3]);
    if (use_extra) logits = Add(logits, Linear(h, params[4], Tensor()));
    return CrossEntropy(logits, y);
  }
  void ZeroGrad() const {
    for (const Tensor& p : params) {
      if (p.grad().defined()) FillInPlace(p.grad(), 0.0f);
    }
  }
  void SgdStep(float lr) const {
    for (const Tensor& p : params) {
      if (p.grad().defined()) AddInPlace(p, p.grad(), -lr);
    }
  }
};

// The global batch of an iteration: `world * per_rank` samples; rank r owns rows [r*per_rank, ...).
struct Batch {
  Tensor x, y;
};
inline Batch GlobalBatch(int iteration, int64_t rows) {
  Generator g(1000 + iteration);
  std::vector<int64_t> labels(rows);
  for (auto& l : labels) l = static_cast<int64_t>(g.RandomIndex(3));
  return {Uniform({rows, 4}, -1.0f, 1.0f, g), FromVector(labels, {rows})};
}
inline Batch Shard(const Batch& global, int rank, int64_t per_rank) {
  return {Contiguous(Narrow(global.x, 0, rank * per_rank, per_rank)),
          Contiguous(Narrow(global.y, 0, rank * per_rank, per_rank))};
}

inline float MaxRelativeError(const Tensor& a, const Tensor& b) {
  std::vector<float> va = a.ToVector<float>(), vb = b.ToVector<float>();
  float worst = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    worst = std::max(worst, std::abs(va[i] - vb[i]) / std::max(std::abs(vb[i]), 1e-3f));
  }
  return worst;
}

// Records the Reducer's events in arrival order ("ready 4", "launch 0", "done 0", "end 0").
class EventLog : public ReducerObserver {
 public:
  void OnGradientReady(const GradientReadyEvent& event) override {
    events.push_back(absl::StrCat("ready ", event.param));
    ready.push_back(event.param);
  }
  void OnBucketLaunched(const BucketLaunchedEvent& event) override {
    events.push_back(absl::StrCat("launch ", event.bucket));
  }
  void OnBucketDone(const BucketDoneEvent& event) override {
    events.push_back(absl::StrCat("done ", event.bucket));
  }
  void OnIterationEnd(const IterationEndEvent& event) override {
    events.push_back(absl::StrCat("end ", event.iteration));
  }
  size_t Count(absl::string_view prefix) const {
    return std::count_if(events.begin(), events.end(),
                         [&](const std::string& e) { return absl::StartsWith(e, prefix); });
  }

  std::vector<std::string> events;
  std::vector<size_t> ready;  // parameters in the order their gradients became ready
};

// One synchronised iteration of `model` on `batch`: the Reducer's status after backward.
inline absl::Status RunIteration(Reducer& reducer, const TinyModel& model, const Batch& batch) {
  Tensor loss = model.Loss(batch.x, batch.y, /*use_extra=*/true);
  DDP_RETURN_IF_ERROR(reducer.PrepareForBackward({loss}, absl::Now()));
  loss.Backward();
  return reducer.status();
}

}  // namespace ddp

#endif  // DDP_REDUCER_REDUCER_TEST_UTIL_H_
