// Reducer::Rebucket (what --bucket_cap_mb=auto does between iterations): the new layout follows the new
// caps in the rebuilt order, and every iteration after it still averages exactly like one process.
#include <gtest/gtest.h>

#include <vector>

#include "comm/process_group.h"
#include "reducer/reducer.h"
#include "reducer/reducer_test_util.h"
#include "tensor/ops.h"
#include "testing/run_ranks.h"

namespace ddp {
namespace {

struct RebucketCase {
  int world;
  bool bucket_view;
  bool rebuild;
};

class RebucketTest : public ::testing::TestWithParam<RebucketCase> {};

// The one-process reference: gradients of every iteration on the whole global batch, with SGD between.
std::vector<std::vector<Tensor>> ReferenceGradients(int world, int64_t per_rank, int iterations) {
  TinyModel reference(11);
  std::vector<std::vector<Tensor>> all;
  for (int it = 0; it < iterations; ++it) {
    reference.ZeroGrad();
    Batch batch = GlobalBatch(it, world * per_rank);
    reference.Loss(batch.x, batch.y, /*use_extra=*/true).Backward();
    std::vector<Tensor> grads;
    for (const Tensor& p : reference.params) grads.push_back(Clone(p.grad()));
    all.push_back(grads);
    reference.SgdStep(0.1f);
  }
  return all;
}

TEST_P(RebucketTest, NewCapsGiveTheirLayoutAndTheSameAveragedGradients) {
  const RebucketCase c = GetParam();
  const int64_t per_rank = 5;
  const int iterations = 6;
  const int rebucket_after = 3;  // past the rebuild (iteration 1 runs in the rebuilt buckets)
  const std::vector<std::vector<Tensor>> reference = ReferenceGradients(c.world, per_rank, iterations);
  RunRanks(c.world, [&](int rank, ProcessGroup& group) {
    TinyModel model(11);
    ReducerOptions options;  // default caps: all five parameters (0.6 KiB) in one bucket
    options.gradient_as_bucket_view = c.bucket_view;
    options.rebuild_buckets = c.rebuild;
    Reducer reducer(model.params, model.names, &group, options);
    ASSERT_EQ(reducer.bucket_assignment().size(), 1u);
    for (int it = 0; it < iterations; ++it) {
      if (it == rebucket_after) {
        std::vector<Tensor> before;
        for (const Tensor& p : model.params) before.push_back(Clone(p.grad()));
        // first bucket 0 (one parameter alone), then 100 B: the other four (352 B) need at least two more.
        reducer.Rebucket(BucketCaps{0, 100});
        EXPECT_EQ(reducer.caps().bucket_cap_bytes, 100u);
        const std::vector<size_t> order = c.rebuild ? *ParseGradientOrder(reducer.RebuiltOrderText(), 5)
                                                    : std::vector<size_t>{4, 3, 2, 1, 0};
        std::vector<BucketParameter> specs;
        for (const Tensor& p : model.params) specs.push_back({p.numel(), p.dtype(), p.device()});
        EXPECT_EQ(reducer.bucket_assignment(), AssignBuckets(specs, BucketCaps{0, 100}, order));
        EXPECT_GE(reducer.bucket_assignment().size(), 3u) << reducer.DescribeBuckets();
        EXPECT_EQ(reducer.buckets_rebuilt(), c.rebuild);
        for (size_t i = 0; i < model.params.size(); ++i) {
          EXPECT_EQ(MaxRelativeError(model.params[i].grad(), before[i]), 0)
              << "gradient kept: " << model.names[i];
        }
      }
      model.ZeroGrad();
      Batch shard = Shard(GlobalBatch(it, c.world * per_rank), rank, per_rank);
      ASSERT_TRUE(RunIteration(reducer, model, shard).ok()) << reducer.status();
      for (size_t i = 0; i < model.params.size(); ++i) {
        EXPECT_LE(MaxRelativeError(model.params[i].grad(), reference[it][i]), 1e-5)
            << model.names[i] << " iteration " << it << " rank " << rank;
      }
      model.SgdStep(0.1f);
    }
    const size_t buckets_after = reducer.bucket_assignment().size();
    EXPECT_EQ(reducer.stats().back().buckets, static_cast<int>(buckets_after))
        << "the last iteration used them";
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, RebucketTest,
                         ::testing::Values(RebucketCase{2, false, true}, RebucketCase{2, true, true},
                                           RebucketCase{3, false, false}, RebucketCase{3, true, false}));

}  // namespace
}  // namespace ddp
