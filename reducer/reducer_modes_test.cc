// The Reducer's modes beside plain averaging: unused parameters (find_unused_parameters, static_graph)
// and world size 1 (pass-through, or every bucket forced through the hook). Ranks are threads over Gloo.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reducer/reducer.h"
#include "reducer/reducer_test_util.h"
#include "tensor/ops.h"
#include "testing/run_ranks.h"

namespace ddp {
namespace {

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

// Note [Gradients of unused parameters]: under find_unused_parameters an output that the search reaches
// but the loss leaves out gives its parameters no gradient; Finalize marks them unused (ready last, their
// bucket launched then) instead of failing. And a parameter unused in the synchronising pass contributes
// what its .grad holds: here the gradient it accumulated in a no_sync pass, averaged over the ranks.
TEST(ReducerTest, OutputLeftOutOfTheLossAndHeldGradientsUnderFindUnused) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    TinyModel model(5);
    ReducerOptions options;
    options.find_unused_parameters = true;
    options.caps.first_bucket_cap_bytes = 0;
    options.caps.bucket_cap_bytes = 0;  // one bucket per parameter
    Reducer reducer(model.params, model.names, &group, options);
    EventLog log;
    reducer.AddObserver(&log);
    const Batch shard = Shard(GlobalBatch(0, 4), rank, 2);
    // Two outputs: the logits' loss, and the extra head's output, which the loss leaves out.
    const Tensor h = Relu(Linear(shard.x, model.params[0], model.params[1]));
    const Tensor loss = CrossEntropy(Linear(h, model.params[2], model.params[3]), shard.y);
    const Tensor extra = Linear(h, model.params[4], Tensor());
    ASSERT_TRUE(reducer.PrepareForBackward({loss, extra}, absl::Now()).ok());
    loss.Backward();
    ASSERT_TRUE(reducer.status().ok()) << reducer.status();
    ASSERT_EQ(log.ready.size(), 5u);
    EXPECT_EQ(log.ready.back(), 4u) << "the left-out head is marked at the end of backward";
    EXPECT_FALSE(model.params[4].grad().defined()) << "unused on every rank: no gradient, as in PyTorch";

    // Accumulate: the extra head is used in a no_sync pass, unused in the synchronising one.
    model.ZeroGrad();
    reducer.SkipNextSync();
    model.Loss(shard.x, shard.y, /*use_extra=*/true).Backward();
    const Tensor sync_loss = model.Loss(shard.x, shard.y, /*use_extra=*/false);
    ASSERT_TRUE(reducer.PrepareForBackward({sync_loss}, absl::Now()).ok());
    sync_loss.Backward();
    ASSERT_TRUE(reducer.status().ok()) << reducer.status();
    Tensor expected = Zeros({3, 8});
    for (int r = 0; r < 2; ++r) {  // each rank's local extra.weight gradient, averaged
      TinyModel local(5);
      const Batch theirs = Shard(GlobalBatch(0, 4), r, 2);
      local.Loss(theirs.x, theirs.y, true).Backward();
      AddInPlace(expected, local.params[4].grad(), 0.5f);
    }
    ASSERT_TRUE(model.params[4].grad().defined());
    EXPECT_LE(MaxRelativeError(model.params[4].grad(), expected), 1e-5);
  });
}

// Counts the int64 all-reduces a Reducer issues (the used map; buckets are float32), records the op of
// every other one (the buckets, compressed or not), claims to fuse kAvg's division when told to
// (ProcessGroup::FusesAverage), and forwards everything to `inner`.
class CountingGroup : public ProcessGroup {
 public:
  explicit CountingGroup(ProcessGroup& inner, bool fuses_average = false)
      : inner_(inner), fuses_average_(fuses_average) {}
  bool FusesAverage() const override { return fuses_average_; }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string backend_name() const override { return inner_.backend_name(); }
  absl::Duration timeout() const override { return inner_.timeout(); }
  std::shared_ptr<Work> AllReduce(const Tensor& t, ReduceOp op) override {
    if (t.dtype() == DType::kInt64) ++int64_all_reduces;
    if (t.dtype() != DType::kInt64) bucket_ops.push_back(op);
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
  std::vector<ReduceOp> bucket_ops;

 private:
  ProcessGroup& inner_;
  const bool fuses_average_;
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


// Note [Averaging in the collective]: on a group that fuses kAvg the plain hook gets undivided buckets and
// all-reduces them with kAvg, and the gradients are bit-identical (world 2) to dividing first, whether they
// are copied into the buckets or are bucket views. A divisor other than the group size (Join) or another
// hook keeps dividing first.
TEST(ReducerTest, GroupsThatFuseTheAverageGetUndividedBuckets) {
  RunRanks(2, [&](int rank, ProcessGroup& gloo) {
    // Two iterations on a fresh model; the gradients, and the ops of the bucket all-reduces.
    auto train = [&](bool fuses_average, bool view, int divisor, std::shared_ptr<CommHook> hook,
                     std::vector<ReduceOp>* ops) {
      CountingGroup group(gloo, fuses_average);
      TinyModel model(5);
      ReducerOptions options;
      options.gradient_as_bucket_view = view;
      options.comm_hook = std::move(hook);
      Reducer reducer(model.params, model.names, &group, options);
      reducer.SetGradientDivisor(divisor);
      std::vector<std::vector<float>> grads;
      for (int it = 0; it < 2; ++it) {
        model.ZeroGrad();
        Batch shard = Shard(GlobalBatch(it, 4), rank, 2);
        Tensor loss = model.Loss(shard.x, shard.y, /*use_extra=*/true);
        EXPECT_TRUE(reducer.PrepareForBackward({loss}, absl::Now()).ok());
        loss.Backward();
        EXPECT_TRUE(reducer.status().ok()) << reducer.status();
        for (const Tensor& p : model.params) grads.push_back(p.grad().ToVector<float>());
      }
      *ops = group.bucket_ops;
      return grads;
    };
    std::vector<ReduceOp> ops;
    for (bool view : {false, true}) {
      SCOPED_TRACE(view ? "gradient_as_bucket_view" : "copied into the buckets");
      const auto divided_first = train(false, view, 2, nullptr, &ops);
      EXPECT_EQ(ops, std::vector<ReduceOp>(ops.size(), ReduceOp::kSum));
      const auto averaged = train(true, view, 2, nullptr, &ops);
      ASSERT_FALSE(ops.empty());
      EXPECT_EQ(ops, std::vector<ReduceOp>(ops.size(), ReduceOp::kAvg));
      EXPECT_EQ(averaged, divided_first);
      train(true, view, 1, nullptr, &ops);
      EXPECT_EQ(ops, std::vector<ReduceOp>(ops.size(), ReduceOp::kSum)) << "divisor 1 on a group of 2";
    }
    absl::StatusOr<std::shared_ptr<CommHook>> fp16 = MakeCommHook("fp16", PowerSgdOptions{});
    ASSERT_TRUE(fp16.ok()) << fp16.status();
    train(true, false, 2, *fp16, &ops);
    ASSERT_FALSE(ops.empty());
    EXPECT_EQ(ops, std::vector<ReduceOp>(ops.size(), ReduceOp::kSum)) << "fp16 hook";
  });
}

// At world size 1 every gradient of `model` equals, bit for bit, one plain backward of `reference` on
// `batch` (averaging over one rank changes nothing).
void ExpectGradientsOfOneBackward(const TinyModel& model, const TinyModel& reference, const Batch& batch) {
  reference.Loss(batch.x, batch.y, true).Backward();
  for (size_t i = 0; i < model.params.size(); ++i) {
    EXPECT_EQ(model.params[i].grad().ToVector<float>(), reference.params[i].grad().ToVector<float>())
        << model.names[i];
  }
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
      const absl::Status status = RunIteration(reducer, model, batch);
      ASSERT_TRUE(status.ok()) << status;
    }
    ExpectGradientsOfOneBackward(model, reference, batch);
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

// ReducerAblations::reduce_at_world_size_1: every bucket goes through the hook at world size 1 (how a
// one-GPU test exercises NCCL buckets), and the gradients equal the plain module's.
TEST(ReducerTest, ForcedReductionAtWorldSizeOneLaunchesEveryBucket) {
  RunRanks(1, [&](int, ProcessGroup& group) {
    TinyModel model(4), reference(4);
    ReducerOptions options;
    options.ablations.reduce_at_world_size_1 = true;
    options.caps.first_bucket_cap_bytes = 0;
    options.caps.bucket_cap_bytes = 0;  // one bucket per parameter
    Reducer reducer(model.params, model.names, &group, options);
    EventLog log;
    reducer.AddObserver(&log);
    Batch batch = GlobalBatch(0, 4);
    const absl::Status status = RunIteration(reducer, model, batch);
    ASSERT_TRUE(status.ok()) << status;
    ExpectGradientsOfOneBackward(model, reference, batch);
    EXPECT_EQ(log.Count("launch "), model.params.size());
    EXPECT_EQ(log.Count("done "), model.params.size());
  });
}

}  // namespace
}  // namespace ddp
