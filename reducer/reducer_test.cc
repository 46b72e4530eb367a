// The Reducer against single-process gradients, ranks as threads over an in-memory store and Gloo.
#include "reducer/reducer.h"

#include <algorithm>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "store/memory_store.h"
#include "comm/gloo/process_group_gloo.h"
#include "reducer/reducer_test_util.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/run_ranks.h"

namespace ddp {
namespace {


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


TEST(ReducerTest, DelayedReductionAblationGivesTheSameGradientsWithoutOverlap) {
  TinyModel reference(12);
  Batch all = GlobalBatch(0, 8);
  reference.Loss(all.x, all.y, true).Backward();
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    TinyModel model(12);
    ReducerOptions options;
    options.ablations.delay_reduction = true;
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
// SetReducerAblations switches the ablation between iterations (bench/bucket_sweep_interleaved): set at
// construction, or switched before the second iteration, both ways.
TEST(ReducerTest, BucketsOverlapASlowBackwardUnlessDelayed) {
  for (const bool delay : {false, true}) {
    RunRanks(2, [&](int rank, ProcessGroup& group) {
      TinyModel model(6);
      ReducerOptions options;
      options.caps = BucketCaps{0, 0};
      options.ablations.delay_reduction = delay;
      Reducer reducer(model.params, model.names, &group, options);
      for (const Tensor& p : model.params) {  // after the Reducer's hooks, so they run after MarkReady
        p.RegisterPostAccumulateGradHook([](const Tensor&) { absl::SleepFor(absl::Milliseconds(10)); });
      }
      ASSERT_TRUE(RunIteration(reducer, model, Shard(GlobalBatch(0, 4), rank, 2)).ok());
      internal::ReducerAblations switched;
      switched.delay_reduction = !delay;
      internal::SetReducerAblations(reducer, switched);
      ASSERT_TRUE(RunIteration(reducer, model, Shard(GlobalBatch(1, 4), rank, 2)).ok());
      ASSERT_EQ(reducer.stats().size(), 2u);
      for (int i = 0; i < 2; ++i) {
        const IterationStats& s = reducer.stats()[i];
        const bool delayed = (i == 0) == delay;
        EXPECT_GT(s.comm_s, 0.0);
        if (delayed) {
          EXPECT_EQ(s.overlapped_comm_s, 0.0) << "iteration " << i;
        } else {
          EXPECT_GT(s.overlapped_comm_s, 0.0) << "iteration " << i;
        }
      }
    });
  }
}

}  // namespace
}  // namespace ddp
