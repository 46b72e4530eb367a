// The Reducer against single-process gradients, ranks as threads over an in-memory store and Gloo.
#include "reducer/reducer.h"

#include <algorithm>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "comm/memory_store.h"
#include "testing/run_ranks.h"
#include "comm/process_group_gloo.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {


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
Batch GlobalBatch(int iteration, int64_t rows) {
  Generator g(1000 + iteration);
  std::vector<int64_t> labels(rows);
  for (auto& l : labels) l = static_cast<int64_t>(g.RandomIndex(3));
  return {Uniform({rows, 4}, -1.0f, 1.0f, g), FromVector(labels, {rows})};
}
Batch Shard(const Batch& global, int rank, int64_t per_rank) {
  return {Contiguous(Narrow(global.x, 0, rank * per_rank, per_rank)),
          Contiguous(Narrow(global.y, 0, rank * per_rank, per_rank))};
}

float MaxRelativeError(const Tensor& a, const Tensor& b) {
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

struct ParityCase {
  int world;
  size_t cap;
  bool bucket_view;
  bool rebuild;
};

class ReducerParityTest : public ::testing::TestWithParam<ParityCase> {};

TEST_P(ReducerParityTest, AveragedGradientsAndParametersMatchOneProcess) {
  const ParityCase c = GetParam();
  const int64_t per_rank = 5;
  const int iterations = 4;
  // Reference: one process on the concatenated batch.
  TinyModel reference(7);
  std::vector<std::vector<Tensor>> reference_grads;
  for (int it = 0; it < iterations; ++it) {
    reference.ZeroGrad();
    Batch batch = GlobalBatch(it, c.world * per_rank);
    reference.Loss(batch.x, batch.y, /*use_extra=*/true).Backward();
    std::vector<Tensor> grads;
    for (const Tensor& p : reference.params) grads.push_back(Clone(p.grad()));
    reference_grads.push_back(grads);
    reference.SgdStep(0.1f);
  }
  RunRanks(c.world, [&](int rank, ProcessGroup& group) {
    TinyModel model(7);
    ReducerOptions options;
    options.caps.first_bucket_cap_bytes = c.cap;
    options.caps.bucket_cap_bytes = c.cap;
    options.gradient_as_bucket_view = c.bucket_view;
    options.rebuild_buckets = c.rebuild;
    Reducer reducer(model.params, model.names, &group, options);
    for (int it = 0; it < iterations; ++it) {
      model.ZeroGrad();
      Batch shard = Shard(GlobalBatch(it, c.world * per_rank), rank, per_rank);
      Tensor loss = model.Loss(shard.x, shard.y, true);
      ASSERT_TRUE(reducer.PrepareForBackward({loss}, absl::Now()).ok());
      loss.Backward();
      ASSERT_TRUE(reducer.status().ok()) << reducer.status();
      for (size_t i = 0; i < model.params.size(); ++i) {
        EXPECT_LE(MaxRelativeError(model.params[i].grad(), reference_grads[it][i]), 1e-5)
            << model.names[i] << " iteration " << it << " rank " << rank;
      }
      model.SgdStep(0.1f);
    }
    for (size_t i = 0; i < model.params.size(); ++i) {
      EXPECT_LE(MaxRelativeError(model.params[i], reference.params[i]), 1e-5) << model.names[i];
    }
    EXPECT_EQ(reducer.buckets_rebuilt(), c.rebuild);
    EXPECT_EQ(reducer.stats().size(), static_cast<size_t>(iterations));
  });
}

INSTANTIATE_TEST_SUITE_P(Caps, ReducerParityTest,
                         ::testing::Values(ParityCase{2, 0, false, true}, ParityCase{2, 64, true, true},
                                           ParityCase{3, 1 << 20, false, false}, ParityCase{3, 0, true, false},
                                           ParityCase{4, 128, false, true}, ParityCase{4, 25 << 20, true, true}));

// One synchronised iteration of `model` on `batch`: the Reducer's status after backward.
absl::Status RunIteration(Reducer& reducer, const TinyModel& model, const Batch& batch) {
  Tensor loss = model.Loss(batch.x, batch.y, /*use_extra=*/true);
  DDP_RETURN_IF_ERROR(reducer.PrepareForBackward({loss}, absl::Now()));
  loss.Backward();
  return reducer.status();
}

std::vector<std::vector<size_t>> OneBucketPerParameter(const std::vector<size_t>& order) {
  std::vector<std::vector<size_t>> buckets;
  for (size_t index : order) buckets.push_back({index});
  return buckets;
}

TEST(ReducerTest, BucketsFollowReverseOrderThenReadyOrder) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    TinyModel model(1);
    ReducerOptions options;
    options.caps = BucketCaps{0, 0};  // one bucket per parameter: the layout is the order
    Reducer reducer(model.params, model.names, &group, options);
    EventLog log;
    reducer.AddObserver(&log);
    EXPECT_EQ(reducer.bucket_assignment(), OneBucketPerParameter({4, 3, 2, 1, 0}));
    EXPECT_NE(reducer.DescribeBuckets().find("bucket 0: 1 params, 0.1 KiB: extra.weight"), std::string::npos)
        << reducer.DescribeBuckets();
    EXPECT_EQ(reducer.RebuiltOrderText(), "");
    ASSERT_TRUE(RunIteration(reducer, model, GlobalBatch(0, 4)).ok());
    const std::string pending_order = reducer.RebuiltOrderText();  // the rebuild is pending
    const std::vector<size_t> first_ready = log.ready;
    ASSERT_TRUE(RunIteration(reducer, model, GlobalBatch(1, 4)).ok());

    // Every rank rebuilt in the order rank 0 observed in the first iteration.
    ASSERT_EQ(first_ready.size(), 5u);
    std::string observed = GradientOrderText(first_ready);
    ASSERT_TRUE(group.BroadcastObject(&observed, 0).ok());
    ASSERT_TRUE(reducer.buckets_rebuilt());
    EXPECT_EQ(reducer.RebuiltOrderText(), observed);
    EXPECT_EQ(reducer.bucket_assignment(), OneBucketPerParameter(*ParseGradientOrder(observed, 5)));
    if (rank == 0) {
      EXPECT_EQ(pending_order, observed) << "rank 0 announced the order its rebuild then used";
    }
  });
}

// A resumed run restores the rebuilt order before its first backward pass: those buckets at once, and
// no rebuild later.
TEST(ReducerTest, RestoredOrderBuildsTheBucketsAtOnce) {
  RunRanks(2, [&](int, ProcessGroup& group) {
    TinyModel model(3);
    ReducerOptions options;
    options.caps = BucketCaps{0, 0};
    Reducer reducer(model.params, model.names, &group, options);
    EXPECT_FALSE(reducer.RestoreBucketOrder("0,0").ok());
    EXPECT_NE(reducer.RestoreBucketOrder("1,7").message().find("\"1,7\" is not a list of distinct parameter "
                                                                "indices below 5"),
              std::string::npos);
    ASSERT_TRUE(reducer.RestoreBucketOrder("2,4,3").ok());
    EXPECT_TRUE(reducer.buckets_rebuilt());
    EXPECT_EQ(reducer.RebuiltOrderText(), "2,4,3,1,0");
    EXPECT_EQ(reducer.bucket_assignment(), OneBucketPerParameter({2, 4, 3, 1, 0}));
    for (int it = 0; it < 2; ++it) ASSERT_TRUE(RunIteration(reducer, model, GlobalBatch(it, 4)).ok());
    EXPECT_EQ(reducer.bucket_assignment(), OneBucketPerParameter({2, 4, 3, 1, 0}));
  });
}

TEST(ReducerTest, UnusedParameterWithoutFindUnusedIsNamedAtNextIteration) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    TinyModel model(3);
    Reducer reducer(model.params, model.names, &group, ReducerOptions{});
    Batch shard = Shard(GlobalBatch(0, 4), rank, 2);
    Tensor loss = model.Loss(shard.x, shard.y, /*use_extra=*/false);
    ASSERT_TRUE(reducer.PrepareForBackward({loss}, absl::Now()).ok());
    loss.Backward();
    Tensor next = model.Loss(shard.x, shard.y, false);
    absl::Status status = reducer.PrepareForBackward({next}, absl::Now());
    ASSERT_FALSE(status.ok());
    EXPECT_NE(status.message().find("extra.weight"), std::string::npos) << status;
    EXPECT_NE(status.message().find("find_unused_parameters"), std::string::npos) << status;
  });
}

TEST(ReducerTest, FindUnusedParametersAveragesBranchUsedOnSomeRanks) {
  const int world = 2;
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    TinyModel model(5);
    ReducerOptions options;
    options.find_unused_parameters = true;
    options.rebuild_buckets = false;
    Reducer reducer(model.params, model.names, &group, options);
    Batch shard = Shard(GlobalBatch(0, 4), rank, 2);
    // Rank 0 uses the extra head, rank 1 does not.
    Tensor loss = model.Loss(shard.x, shard.y, /*use_extra=*/rank == 0);
    ASSERT_TRUE(reducer.PrepareForBackward({loss}, absl::Now()).ok());
    loss.Backward();
    ASSERT_TRUE(reducer.status().ok()) << reducer.status();
    // Expected: rank 0's local extra.weight gradient divided by 2, on both ranks.
    TinyModel local(5);
    Batch shard0 = Shard(GlobalBatch(0, 4), 0, 2);
    local.Loss(shard0.x, shard0.y, true).Backward();
    ASSERT_TRUE(model.params[4].grad().defined());
    EXPECT_LE(MaxRelativeError(model.params[4].grad(), MulScalar(local.params[4].grad(), 0.5f)), 1e-5);

    // A second iteration where nobody uses it: the gradient stays as it was (not overwritten).
    model.ZeroGrad();
    Tensor loss2 = model.Loss(shard.x, shard.y, false);
    ASSERT_TRUE(reducer.PrepareForBackward({loss2}, absl::Now()).ok());
    loss2.Backward();
    ASSERT_TRUE(reducer.status().ok()) << reducer.status();
    EXPECT_EQ(Sum(model.params[4].grad()).item(), 0.0);
  });
}

TEST(ReducerTest, ParameterUnusedOnEveryRankKeepsNoGradient) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    TinyModel model(5);
    ReducerOptions options;
    options.find_unused_parameters = true;
    Reducer reducer(model.params, model.names, &group, options);
    Batch shard = Shard(GlobalBatch(0, 4), rank, 2);
    Tensor loss = model.Loss(shard.x, shard.y, false);
    ASSERT_TRUE(reducer.PrepareForBackward({loss}, absl::Now()).ok());
    loss.Backward();
    ASSERT_TRUE(reducer.status().ok()) << reducer.status();
    EXPECT_FALSE(model.params[4].grad().defined());
    EXPECT_TRUE(model.params[0].grad().defined());
  });
}

// Counts the int64 all-reduces a Reducer issues (the used map; buckets are float32) and forwards
// everything to `inner`.
class CountingGroup : public ProcessGroup {
 public:
  explicit CountingGroup(ProcessGroup& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string backend_name() const override { return inner_.backend_name(); }
  absl::Duration timeout() const override { return inner_.timeout(); }
  std::shared_ptr<Work> AllReduce(const Tensor& t, ReduceOp op) override {
    if (t.dtype() == DType::kInt64) ++int64_all_reduces;
    return inner_.AllReduce(t, op);
  }
  std::shared_ptr<Work> Broadcast(const Tensor& t, int root) override { return inner_.Broadcast(t, root); }
  std::shared_ptr<Work> AllGather(const std::vector<Tensor>& out, const Tensor& in) override {
    return inner_.AllGather(out, in);
  }
  std::shared_ptr<Work> ReduceScatter(const Tensor& out, const std::vector<Tensor>& in, ReduceOp op) override {
    return inner_.ReduceScatter(out, in, op);
  }
  std::shared_ptr<Work> Reduce(const Tensor& t, int root, ReduceOp op) override { return inner_.Reduce(t, root, op); }
  std::shared_ptr<Work> Barrier() override { return inner_.Barrier(); }
  int int64_all_reduces = 0;

 private:
  ProcessGroup& inner_;
};

// static_graph with find_unused_parameters: the used map is all-reduced in the first iteration only, and
// every iteration's gradients equal those of the search-every-iteration mode.
TEST(ReducerTest, StaticGraphReducesTheUsedMapOnce) {
  RunRanks(2, [&](int rank, ProcessGroup& gloo) {
    std::vector<std::vector<float>> grads[2];
    int used_map_reductions[2];
    for (bool is_static : {false, true}) {
      CountingGroup group(gloo);
      TinyModel model(5);
      ReducerOptions options;
      options.find_unused_parameters = true;
      options.static_graph = is_static;
      Reducer reducer(model.params, model.names, &group, options);
      for (int it = 0; it < 3; ++it) {
        model.ZeroGrad();
        Batch shard = Shard(GlobalBatch(it, 4), rank, 2);
        Tensor loss = model.Loss(shard.x, shard.y, /*use_extra=*/false);  // the same graph every time
        ASSERT_TRUE(reducer.PrepareForBackward({loss}, absl::Now()).ok());
        loss.Backward();
        ASSERT_TRUE(reducer.status().ok()) << reducer.status();
        for (int p = 0; p < 4; ++p) grads[is_static].push_back(model.params[p].grad().ToVector<float>());
        EXPECT_FALSE(model.params[4].grad().defined());
      }
      used_map_reductions[is_static] = group.int64_all_reduces;
    }
    EXPECT_EQ(used_map_reductions[0], 3);
    EXPECT_EQ(used_map_reductions[1], 1);
    EXPECT_EQ(grads[0], grads[1]);
  });
}

TEST(ReducerTest, NoSyncAccumulationEqualsOneLargerBatch) {
  const int world = 2, k = 3;
  const int64_t per_rank = 2;
  // Reference: one process, batch of k * world * per_rank, loss = mean over all.
  TinyModel reference(9);
  Batch all = GlobalBatch(0, k * world * per_rank);
  reference.Loss(all.x, all.y, true).Backward();
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    TinyModel model(9);
    Reducer reducer(model.params, model.names, &group, ReducerOptions{});
    for (int step = 0; step < k; ++step) {
      // Micro-batch `step` of this rank; the loss is scaled by 1/k so the sum is the mean.
      Batch micro = Shard(Batch{Contiguous(Narrow(all.x, 0, step * world * per_rank, world * per_rank)),
                                Contiguous(Narrow(all.y, 0, step * world * per_rank, world * per_rank))},
                          rank, per_rank);
      Tensor loss = MulScalar(model.Loss(micro.x, micro.y, true), 1.0f / k);
      if (step < k - 1) {
        reducer.SkipNextSync();
      } else {
        ASSERT_TRUE(reducer.PrepareForBackward({loss}, absl::Now()).ok());
      }
      loss.Backward();
    }
    ASSERT_TRUE(reducer.status().ok());
    for (size_t i = 0; i < model.params.size(); ++i) {
      EXPECT_LE(MaxRelativeError(model.params[i].grad(), reference.params[i].grad()), 1e-5) << model.names[i];
    }
  });
}

TEST(ReducerTest, CompressionHooksStayWithinTolerance) {
  for (const char* hook_name : {"fp16", "bf16"}) {
    const float tolerance = std::string(hook_name) == "fp16" ? 2e-3f : 2e-2f;
    TinyModel reference(11);
    Batch all = GlobalBatch(0, 8);
    reference.Loss(all.x, all.y, true).Backward();
    RunRanks(2, [&](int rank, ProcessGroup& group) {
      TinyModel model(11);
      ReducerOptions options;
      options.comm_hook = *MakeCommHook(hook_name);
      Reducer reducer(model.params, model.names, &group, options);
      Batch shard = Shard(all, rank, 4);
      Tensor loss = model.Loss(shard.x, shard.y, true);
      ASSERT_TRUE(reducer.PrepareForBackward({loss}, absl::Now()).ok());
      loss.Backward();
      ASSERT_TRUE(reducer.status().ok());
      for (size_t i = 0; i < model.params.size(); ++i) {
        std::vector<float> got = model.params[i].grad().ToVector<float>();
        std::vector<float> want = reference.params[i].grad().ToVector<float>();
        float scale = 0;
        for (float w : want) scale = std::max(scale, std::abs(w));
        for (size_t j = 0; j < got.size(); ++j) {
          EXPECT_NEAR(got[j], want[j], tolerance * std::max(scale, 1e-3f)) << hook_name << " " << model.names[i];
        }
      }
    });
  }
  EXPECT_FALSE(MakeCommHook("int8").ok());
}

// Note [World size 1]: the gradients stay as backward left them, nothing is launched, the layout is
// never rebuilt, and a parameter without gradient is still named.
TEST(ReducerTest, WorldSizeOneReducesNothingAndStillNamesUnusedParameters) {
  RunRanks(1, [&](int, ProcessGroup& group) {
    TinyModel model(4), reference(4);
    Reducer reducer(model.params, model.names, &group, ReducerOptions{});
    EventLog log;
    reducer.AddObserver(&log);
    Batch batch = GlobalBatch(0, 4);
    for (int it = 0; it < 2; ++it) {
      model.ZeroGrad();
      Tensor loss = model.Loss(batch.x, batch.y, true);
      ASSERT_TRUE(reducer.PrepareForBackward({loss}, absl::Now()).ok());
      loss.Backward();
      ASSERT_TRUE(reducer.status().ok()) << reducer.status();
    }
    reference.Loss(batch.x, batch.y, true).Backward();
    for (size_t i = 0; i < model.params.size(); ++i) {
      EXPECT_EQ(model.params[i].grad().ToVector<float>(), reference.params[i].grad().ToVector<float>());
    }
    EXPECT_EQ(reducer.stats().size(), 2u);
    EXPECT_EQ(log.Count("ready "), 10u);
    EXPECT_EQ(log.Count("launch "), 0u);
    EXPECT_EQ(log.Count("done "), 0u);
    EXPECT_FALSE(reducer.buckets_rebuilt());
    EXPECT_EQ(reducer.RebuiltOrderText(), "");
    Tensor partial = model.Loss(batch.x, batch.y, false);
    ASSERT_TRUE(reducer.PrepareForBackward({partial}, absl::Now()).ok());
    partial.Backward();
    EXPECT_NE(reducer.status().message().find("extra.weight"), std::string::npos) << reducer.status();
  });
}

// ReducerOptions::reduce_at_world_size_1: every bucket goes through the hook at world size 1 (how a
// one-GPU test exercises NCCL buckets), and the gradients equal the plain module's.
TEST(ReducerTest, ForcedReductionAtWorldSizeOneLaunchesEveryBucket) {
  RunRanks(1, [&](int, ProcessGroup& group) {
    TinyModel model(4), reference(4);
    ReducerOptions options;
    options.reduce_at_world_size_1 = true;
    options.caps.first_bucket_cap_bytes = 0;
    options.caps.bucket_cap_bytes = 0;  // one bucket per parameter
    Reducer reducer(model.params, model.names, &group, options);
    EventLog log;
    reducer.AddObserver(&log);
    Batch batch = GlobalBatch(0, 4);
    Tensor loss = model.Loss(batch.x, batch.y, true);
    ASSERT_TRUE(reducer.PrepareForBackward({loss}, absl::Now()).ok());
    loss.Backward();
    ASSERT_TRUE(reducer.status().ok()) << reducer.status();
    reference.Loss(batch.x, batch.y, true).Backward();
    for (size_t i = 0; i < model.params.size(); ++i) {
      EXPECT_EQ(model.params[i].grad().ToVector<float>(), reference.params[i].grad().ToVector<float>());
    }
    EXPECT_EQ(log.Count("launch "), model.params.size());
    EXPECT_EQ(log.Count("done "), model.params.size());
  });
}

TEST(ReducerTest, DelayedReductionAblationGivesTheSameGradientsWithoutOverlap) {
  TinyModel reference(12);
  Batch all = GlobalBatch(0, 8);
  reference.Loss(all.x, all.y, true).Backward();
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    TinyModel model(12);
    ReducerOptions options;
    options.delay_reduction = true;
    options.caps.first_bucket_cap_bytes = 0;
    options.caps.bucket_cap_bytes = 0;
    Reducer reducer(model.params, model.names, &group, options);
    Batch shard = Shard(all, rank, 4);
    Tensor loss = model.Loss(shard.x, shard.y, true);
    ASSERT_TRUE(reducer.PrepareForBackward({loss}, absl::Now()).ok());
    loss.Backward();
    ASSERT_TRUE(reducer.status().ok()) << reducer.status();
    for (size_t i = 0; i < model.params.size(); ++i) {
      EXPECT_LE(MaxRelativeError(model.params[i].grad(), reference.params[i].grad()), 1e-5) << model.names[i];
    }
    EXPECT_EQ(reducer.stats()[0].overlapped_comm_s, 0.0);
  });
}

TEST(ReducerTest, StatsAndTraceAreRecorded) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    TinyModel model(2);
    ReducerOptions options;
    options.record_trace = true;
    options.caps = BucketCaps{0, 0};
    Reducer reducer(model.params, model.names, &group, options);
    Batch shard = Shard(GlobalBatch(0, 4), rank, 2);
    for (int it = 0; it < 2; ++it) {
      Tensor loss = model.Loss(shard.x, shard.y, true);
      const absl::Time before = absl::Now();
      // The forward began 50 ms before PrepareForBackward.
      ASSERT_TRUE(reducer.PrepareForBackward({loss}, before - absl::Milliseconds(50)).ok());
      loss.Backward();
      const double wall = absl::ToDoubleSeconds(absl::Now() - before);
      ASSERT_EQ(reducer.stats().size(), static_cast<size_t>(it + 1));
      const IterationStats& s = reducer.stats()[it];
      EXPECT_EQ(s.iteration, it);
      EXPECT_EQ(s.buckets, 5);
      EXPECT_GE(s.forward_s, 0.05);
      EXPECT_LE(s.forward_s, 0.05 + wall);
      // Backward and every bucket's communication happened between `before` and now.
      EXPECT_GT(s.backward_compute_s, 0.0);
      EXPECT_LE(s.backward_compute_s, wall);
      EXPECT_GT(s.comm_s, 0.0);
      EXPECT_LE(s.comm_s, wall);
      EXPECT_LE(s.exposed_comm_s, wall);
    }
    // Per iteration: 5 gradients ready, 5 launches, 5 bucket spans, forward and backward, plus the
    // exposed-communication slices (how many depends on timing: the merged parts after backward).
    const std::string events = reducer.trace().EventsJson();
    size_t exposed = 0;
    for (size_t at = events.find("\"exposed communication\""); at != std::string::npos;
         at = events.find("\"exposed communication\"", at + 1)) {
      ++exposed;
    }
    EXPECT_EQ(reducer.trace().size() - exposed, 2u * 17u);
    EXPECT_NE(events.find("grad ready: fc2.bias"), std::string::npos);
    EXPECT_LT(events.find("grad ready: extra.weight"), events.find("launch bucket 0"));
    EXPECT_NE(events.find("launch bucket 4"), std::string::npos);
    EXPECT_NE(events.find("\"name\": \"bucket 0 allreduce\""), std::string::npos);
  });
}

// Note [Reducer observers]: per iteration every gradient and launch comes first, then every bucket is
// done in bucket order, and the iteration ends last.
TEST(ReducerTest, ObserversSeeReadyAndLaunchThenDoneThenEnd) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    TinyModel model(2);
    ReducerOptions options;
    options.caps = BucketCaps{0, 0};
    options.record_stats = false;
    Reducer reducer(model.params, model.names, &group, options);
    EventLog log;
    reducer.AddObserver(&log);
    ASSERT_TRUE(RunIteration(reducer, model, Shard(GlobalBatch(0, 4), rank, 2)).ok());
    ASSERT_EQ(log.events.size(), 16u);
    const auto first_done = log.events.begin() + 10;
    const auto is_ready = [](const std::string& e) { return absl::StartsWith(e, "ready "); };
    EXPECT_EQ(std::count_if(log.events.begin(), first_done, is_ready), 5);  // and so 5 launches
    EXPECT_EQ(std::vector<std::string>(first_done, log.events.end()),
              (std::vector<std::string>{"done 0", "done 1", "done 2", "done 3", "done 4", "end 0"}));
  });
}

TEST(ReducerTest, WithoutObserversNothingIsRecorded) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    TinyModel model(2);
    ReducerOptions options;
    options.record_stats = false;
    Reducer reducer(model.params, model.names, &group, options);
    EXPECT_FALSE(reducer.observed());
    Batch shard = Shard(GlobalBatch(0, 4), rank, 2);
    Tensor loss = model.Loss(shard.x, shard.y, true);
    ASSERT_TRUE(reducer.PrepareForBackward({loss}, absl::Time()).ok());
    loss.Backward();
    ASSERT_TRUE(reducer.status().ok()) << reducer.status();
    EXPECT_TRUE(reducer.stats().empty());
    EXPECT_EQ(reducer.trace().size(), 0u);
    EventLog log;
    reducer.AddObserver(&log);
    EXPECT_TRUE(reducer.observed());
  });
}

// Communication overlaps backward unless the delay_reduction ablation holds it back. Every gradient hook
// ends with a 10 ms sleep, so each launched bucket has at least that much backward left to overlap.
TEST(ReducerTest, BucketsOverlapASlowBackwardUnlessDelayed) {
  for (const bool delay : {false, true}) {
    RunRanks(2, [&](int rank, ProcessGroup& group) {
      TinyModel model(6);
      ReducerOptions options;
      options.caps = BucketCaps{0, 0};
      options.delay_reduction = delay;
      Reducer reducer(model.params, model.names, &group, options);
      for (const Tensor& p : model.params) {  // after the Reducer's hooks, so they run after MarkReady
        p.RegisterPostAccumulateGradHook([](const Tensor&) { absl::SleepFor(absl::Milliseconds(10)); });
      }
      ASSERT_TRUE(RunIteration(reducer, model, Shard(GlobalBatch(0, 4), rank, 2)).ok());
      const IterationStats& s = reducer.stats()[0];
      EXPECT_GT(s.comm_s, 0.0);
      if (delay) {
        EXPECT_EQ(s.overlapped_comm_s, 0.0);
      } else {
        EXPECT_GT(s.overlapped_comm_s, 0.0);
      }
    });
  }
}

}  // namespace
}  // namespace ddp
