// The Reducer against single-process gradients, ranks as threads over an in-memory store and Gloo.
#include "reducer/reducer.h"

#include <algorithm>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>

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
    options.first_bucket_cap_bytes = c.cap;
    options.bucket_cap_bytes = c.cap;
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

TEST(ReducerTest, BucketsFollowReverseOrderThenReadyOrder) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    TinyModel model(1);
    ReducerOptions options;
    options.first_bucket_cap_bytes = 0;
    options.bucket_cap_bytes = 0;
    Reducer reducer(model.params, model.names, &group, options);
    EXPECT_EQ(reducer.bucket_assignment(), (std::vector<std::vector<size_t>>{{4}, {3}, {2}, {1}, {0}}));
    EXPECT_NE(reducer.DescribeBuckets().find("bucket 0: 1 params, 0.1 KiB: extra.weight"), std::string::npos)
        << reducer.DescribeBuckets();
    std::string pending_order;
    for (int it = 0; it < 2; ++it) {
      EXPECT_EQ(reducer.RebuiltOrderText().empty(), it == 0);
      Batch batch = GlobalBatch(it, 4);
      Tensor loss = model.Loss(batch.x, batch.y, true);
      ASSERT_TRUE(reducer.PrepareForBackward({loss}, absl::Now()).ok());
      loss.Backward();
      ASSERT_TRUE(reducer.status().ok());
      if (it == 0) pending_order = reducer.RebuiltOrderText();  // the rebuild is pending
    }
    // After the rebuild each bucket holds what became ready together, in ready order: the launch order
    // is a permutation that starts with the last layer's parameters.
    ASSERT_TRUE(reducer.buckets_rebuilt());
    EXPECT_EQ(reducer.bucket_assignment().size(), 5u);

    // A resumed run restores the rebuilt order before its first backward pass: the same buckets at
    // once, and no rebuild later.
    const std::string order = reducer.RebuiltOrderText();
    EXPECT_EQ(std::count(order.begin(), order.end(), ','), 4) << order;
    if (rank == 0) EXPECT_EQ(pending_order, order) << "rank 0 announced the order its rebuild then used";
    TinyModel resumed_model(3);
    Reducer resumed(resumed_model.params, resumed_model.names, &group, options);
    EXPECT_FALSE(resumed.RestoreBucketOrder("0,0").ok());
    EXPECT_NE(resumed.RestoreBucketOrder("1,7").message().find("\"1,7\" is not a list of distinct parameter "
                                                                "indices below 5"),
              std::string::npos);
    ASSERT_TRUE(resumed.RestoreBucketOrder(order).ok());
    EXPECT_TRUE(resumed.buckets_rebuilt());
    EXPECT_EQ(resumed.bucket_assignment(), reducer.bucket_assignment());
    Batch batch = GlobalBatch(2, 4);
    Tensor loss = resumed_model.Loss(batch.x, batch.y, true);
    ASSERT_TRUE(resumed.PrepareForBackward({loss}, absl::Now()).ok());
    loss.Backward();
    ASSERT_TRUE(resumed.status().ok());
    EXPECT_EQ(resumed.bucket_assignment(), reducer.bucket_assignment());
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

TEST(ReducerTest, WorldSizeOneIsAPassThroughThatStillNamesUnusedParameters) {
  RunRanks(1, [&](int, ProcessGroup& group) {
    TinyModel model(4), reference(4);
    Reducer reducer(model.params, model.names, &group, ReducerOptions{});
    Batch batch = GlobalBatch(0, 4);
    Tensor loss = model.Loss(batch.x, batch.y, true);
    ASSERT_TRUE(reducer.PrepareForBackward({loss}, absl::Now()).ok());
    loss.Backward();
    reference.Loss(batch.x, batch.y, true).Backward();
    for (size_t i = 0; i < model.params.size(); ++i) {
      EXPECT_EQ(model.params[i].grad().ToVector<float>(), reference.params[i].grad().ToVector<float>());
    }
    EXPECT_EQ(reducer.stats().size(), 1u);
    Tensor partial = model.Loss(batch.x, batch.y, false);
    ASSERT_TRUE(reducer.PrepareForBackward({partial}, absl::Now()).ok());
    partial.Backward();
    EXPECT_NE(reducer.status().message().find("extra.weight"), std::string::npos) << reducer.status();
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
    options.first_bucket_cap_bytes = 0;
    options.bucket_cap_bytes = 0;
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
    options.first_bucket_cap_bytes = 0;
    options.bucket_cap_bytes = 0;
    Reducer reducer(model.params, model.names, &group, options);
    Batch shard = Shard(GlobalBatch(0, 4), rank, 2);
    Tensor loss = model.Loss(shard.x, shard.y, true);
    ASSERT_TRUE(reducer.PrepareForBackward({loss}, absl::Now()).ok());
    loss.Backward();
    ASSERT_EQ(reducer.stats().size(), 1u);
    const IterationStats& s = reducer.stats()[0];
    EXPECT_EQ(s.buckets, 5);
    EXPECT_GT(s.comm_s, 0.0);
    EXPECT_GE(s.comm_s + 1e-9, s.overlapped_comm_s);
    const std::string events = reducer.trace().EventsJson();
    EXPECT_NE(events.find("grad ready: fc2.bias"), std::string::npos);
    EXPECT_NE(events.find("launch bucket 4"), std::string::npos);
    EXPECT_NE(events.find("\"name\": \"bucket 0 allreduce\""), std::string::npos);
  });
}

}  // namespace
}  // namespace ddp
