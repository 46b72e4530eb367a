// ZeroRedundancyOptimizer (Note [ZeRO-1]) against the unsharded optimizer under DDP, ranks as threads
// over Gloo: weights, consolidated state, state bytes per rank, bit-exact resume,
// and clipping by the global norm against one process on the joint batch.
#include "ddp/zero_redundancy_optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"

#include "ddp/distributed_data_parallel.h"
#include "ddp/zero_reduce_scatter_hook.h"
#include "nn/adam.h"
#include "nn/clip_grad.h"
#include "nn/layers.h"
#include "nn/sgd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/run_ranks.h"

namespace ddp {
namespace {

// 8 -> 16 -> 3: 195 parameters in 4 tensors (not a multiple of 2, so shards are padded at W = 2).
std::shared_ptr<Module> SmallModel() {
  Generator g(7);
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<Module>>{
      std::make_shared<nn::Linear>(8, 16, g), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 3, g)});
}

struct Batch {
  Tensor x, y;
};
constexpr int64_t kRowsPerRank = 4;
Batch RankBatch(int step, int rank) {
  Generator g(1000 + 17 * step + rank);
  std::vector<int64_t> labels(kRowsPerRank);
  for (auto& l : labels) l = static_cast<int64_t>(g.RandomIndex(3));
  return {Normal({kRowsPerRank, 8}, 0.0f, 1.0f, g), FromVector(labels, {kRowsPerRank})};
}

std::vector<Tensor> CloneAll(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.push_back(Clone(t));
  return out;
}

float MaxAbsDiff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const std::vector<float> va = HostContiguous(a).ToVector<float>(), vb = HostContiguous(b).ToVector<float>();
  float diff = 0;
  for (size_t i = 0; i < va.size(); ++i) diff = std::max(diff, std::abs(va[i] - vb[i]));
  return diff;
}

bool BitIdentical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && HostContiguous(a).ToVector<float>() == HostContiguous(b).ToVector<float>();
}

ZeroOptions Options(ZeroInnerOptimizer kind) {
  ZeroOptions options;
  options.optimizer = kind;
  options.sgd.lr = 0.05f;
  options.sgd.momentum = 0.9f;
  options.sgd.weight_decay = 1e-3f;
  options.adam.lr = 1e-2f;
  options.adam.weight_decay = kind == ZeroInnerOptimizer::kAdamW ? 1e-2f : 1e-3f;
  return options;
}

std::unique_ptr<Optimizer> Unsharded(const std::vector<Tensor>& params, const ZeroOptions& o) {
  if (o.optimizer == ZeroInnerOptimizer::kSgd) return std::make_unique<Sgd>(params, o.sgd);
  if (o.optimizer == ZeroInnerOptimizer::kAdamW) return std::make_unique<AdamW>(params, o.adam);
  return std::make_unique<Adam>(params, o.adam);
}

// Steps [first, first + steps) of DDP training on `rank`'s batches; with `zero` it steps (and clips)
// through ZeRO, else through `plain` (and nn's ClipGradNorm).
void Train(DistributedDataParallel& ddp, Optimizer* plain, ZeroRedundancyOptimizer* zero, int rank, int first,
           int steps, double clip = 0) {
  for (int s = first; s < first + steps; ++s) {
    ddp.ZeroGrad();
    const Batch batch = RankBatch(s, rank);
    CrossEntropy(ddp.Forward(batch.x), batch.y).Backward();
    ASSERT_TRUE(ddp.status().ok()) << ddp.status();
    if (zero != nullptr) {
      if (clip > 0) {
        ASSERT_TRUE(zero->ClipGradNorm(clip).ok());
      }
      ASSERT_TRUE(zero->TryStep().ok());
    } else {
      ASSERT_NE(plain, nullptr);
      if (clip > 0) {
        ASSERT_TRUE(ClipGradNorm(plain->params(), clip).ok());
      }
      plain->Step();
    }
  }
}

size_t StateBytes(const OptimizerState& state) {
  size_t bytes = 0;
  for (const auto& [key, t] : state.tensors) bytes += t.nbytes();
  return bytes;
}

TEST(ZeroLayoutTest, ShardsArePaddedRangesOfTheFlatGroup) {
  auto layout = ComputeZeroLayout({3, 5, 2}, {}, 3);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->size(), 1u);
  EXPECT_EQ((*layout)[0].numel, 10);
  EXPECT_EQ((*layout)[0].shard_numel, 4);
  const std::vector<int64_t> numels = {3, 5, 2};
  auto r0 = ZeroShardSegments((*layout)[0], numels, 0);
  ASSERT_EQ(r0.size(), 2u);
  EXPECT_EQ(r0[0].param, 0u);
  EXPECT_EQ(r0[0].length, 3);
  EXPECT_EQ(r0[1].param, 1u);
  EXPECT_EQ(r0[1].param_offset, 0);
  EXPECT_EQ(r0[1].shard_offset, 3);
  EXPECT_EQ(r0[1].length, 1);
  auto r1 = ZeroShardSegments((*layout)[0], numels, 1);
  ASSERT_EQ(r1.size(), 1u);
  EXPECT_EQ(r1[0].param, 1u);
  EXPECT_EQ(r1[0].param_offset, 1);
  EXPECT_EQ(r1[0].length, 4);
  auto r2 = ZeroShardSegments((*layout)[0], numels, 2);  // 2 elements and 2 of padding
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_EQ(r2[0].param, 2u);
  EXPECT_EQ(r2[0].length, 2);
}

TEST(ZeroLayoutTest, GroupsMustCoverEveryParameterOnce) {
  EXPECT_TRUE(ComputeZeroLayout({3, 5}, {{1}, {0}}, 2).ok());
  EXPECT_FALSE(ComputeZeroLayout({3, 5}, {{0, 0}, {1}}, 2).ok());
  EXPECT_FALSE(ComputeZeroLayout({3, 5}, {{0}}, 2).ok());
  EXPECT_FALSE(ComputeZeroLayout({3, 5}, {{0, 2}, {1}}, 2).ok());
  EXPECT_FALSE(ComputeZeroLayout({3}, {}, 0).ok());
}

struct Case {
  ZeroInnerOptimizer kind;
  int world;
  int steps;
  bool bucket_groups;  // shards follow DDP's buckets instead of one flat group
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const char* names[] = {"sgd", "adam", "adamw"};
  return absl::StrCat(names[static_cast<int>(info.param.kind)], "_w", info.param.world,
                      info.param.bucket_groups ? "_buckets" : "");
}

class ZeroParityTest : public ::testing::TestWithParam<Case> {};

// After `steps` steps the weights equal DDP + the unsharded optimizer (within rounding), the
// consolidated state equals its state dict, and each rank holds about 1/W of the state bytes.
TEST_P(ZeroParityTest, MatchesUnshardedOptimizer) {
  const Case c = GetParam();
  const ZeroOptions options = Options(c.kind);
  std::vector<Tensor> reference_weights;
  OptimizerState reference_state;
  RunRanks(c.world, [&](int rank, ProcessGroup& group) {
    auto ddp = DistributedDataParallel::Create(SmallModel(), &group);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    std::unique_ptr<Optimizer> plain = Unsharded((*ddp)->Parameters(), options);
    Train(**ddp, plain.get(), nullptr, rank, 0, c.steps);
    if (rank == 0) {
      reference_weights = CloneAll((*ddp)->Parameters());
      reference_state = plain->StateDict();
    }
  });
  std::mutex mu;
  std::vector<size_t> shard_bytes(c.world);
  RunRanks(c.world, [&](int rank, ProcessGroup& group) {
    auto ddp = DistributedDataParallel::Create(SmallModel(), &group);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ZeroOptions zero_options = options;
    if (c.bucket_groups) zero_options.groups = (*ddp)->reducer().bucket_assignment();
    auto zero = ZeroRedundancyOptimizer::Create((*ddp)->Parameters(), &group, zero_options);
    ASSERT_TRUE(zero.ok()) << zero.status();
    Train(**ddp, nullptr, zero->get(), rank, 0, c.steps);
    const std::vector<Tensor> params = (*ddp)->Parameters();
    {
      std::lock_guard<std::mutex> lock(mu);  // released before the collective below
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_LE(MaxAbsDiff(params[i], reference_weights[i]), 1e-6f) << "rank " << rank << " parameter " << i;
      }
      shard_bytes[rank] = (*zero)->state_bytes();
    }
    ASSERT_TRUE((*zero)->ConsolidateStateDict(0).ok());
    const OptimizerState state = (*zero)->StateDict();
    EXPECT_EQ(state.step_count, c.steps);
    if (rank != 0) {
      EXPECT_TRUE(state.tensors.empty());
      return;
    }
    std::map<std::string, Tensor> by_key(state.tensors.begin(), state.tensors.end());
    ASSERT_EQ(by_key.size(), reference_state.tensors.size());
    for (const auto& [key, expected] : reference_state.tensors) {
      ASSERT_EQ(by_key.count(key), 1u) << key;
      if (expected.dtype() == DType::kInt64) {
        EXPECT_EQ(by_key[key].item(), expected.item()) << key;
      } else {
        EXPECT_LE(MaxAbsDiff(by_key[key], expected), 1e-6f) << key;
      }
    }
  });
  // Padding makes each shard at most one element per group (and field) larger than 1/W; Adam's
  // per-parameter step scalars become one per group.
  const size_t unsharded = StateBytes(reference_state);
  for (int r = 0; r < c.world; ++r) {
    const double ratio = static_cast<double>(shard_bytes[r]) * c.world / static_cast<double>(unsharded);
    EXPECT_NEAR(ratio, 1.0, 0.1) << "rank " << r << ": " << shard_bytes[r] << " of " << unsharded << " bytes";
  }
}

INSTANTIATE_TEST_SUITE_P(Zero, ZeroParityTest,
                         ::testing::Values((Case{ZeroInnerOptimizer::kAdam, 2, 50, false}),
                                           (Case{ZeroInnerOptimizer::kAdam, 3, 50, false}),
                                           (Case{ZeroInnerOptimizer::kAdam, 3, 20, true}),
                                           (Case{ZeroInnerOptimizer::kAdamW, 2, 20, false}),
                                           (Case{ZeroInnerOptimizer::kSgd, 3, 20, true})),
                         CaseName);

// Consolidate at step k, restore weights and state into a fresh DDP + ZeRO, continue: bit-identical
// to the uninterrupted run. Bucket rebuild is off so that both runs reduce in the same bucket layout.
TEST(ZeroResumeTest, ResumeIsBitExact) {
  const int world = 2, k = 10;
  const ZeroOptions options = Options(ZeroInnerOptimizer::kAdam);
  DdpOptions ddp_options;
  ddp_options.reducer.rebuild_buckets = false;
  std::vector<std::vector<Tensor>> uninterrupted(world), saved_weights(world);
  OptimizerState saved_state;
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    auto ddp = DistributedDataParallel::Create(SmallModel(), &group, ddp_options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto zero = ZeroRedundancyOptimizer::Create((*ddp)->Parameters(), &group, options);
    ASSERT_TRUE(zero.ok());
    Train(**ddp, nullptr, zero->get(), rank, 0, k);
    saved_weights[rank] = CloneAll((*ddp)->Parameters());
    ASSERT_TRUE((*zero)->ConsolidateStateDict(0).ok());
    if (rank == 0) saved_state = (*zero)->StateDict();
    Train(**ddp, nullptr, zero->get(), rank, k, k);
    uninterrupted[rank] = CloneAll((*ddp)->Parameters());
  });
  ASSERT_FALSE(saved_state.tensors.empty());
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<Module> model = SmallModel();
    const std::vector<Tensor> params = model->Parameters();
    for (size_t i = 0; i < params.size(); ++i) CopyInPlace(params[i], saved_weights[0][i]);
    auto ddp = DistributedDataParallel::Create(model, &group, ddp_options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto zero = ZeroRedundancyOptimizer::Create((*ddp)->Parameters(), &group, options);
    ASSERT_TRUE(zero.ok());
    ASSERT_TRUE((*zero)->LoadStateDict(saved_state).ok());
    EXPECT_EQ((*zero)->step_count(), k);
    Train(**ddp, nullptr, zero->get(), rank, k, k);
    const std::vector<Tensor> resumed = (*ddp)->Parameters();
    for (size_t i = 0; i < resumed.size(); ++i) {
      EXPECT_TRUE(BitIdentical(resumed[i], uninterrupted[rank][i])) << "rank " << rank << " parameter " << i;
    }
  });
}

TEST(ZeroResumeTest, LoadRejectsStateThatDoesNotFit) {
  RunRanks(1, [&](int, ProcessGroup& group) {
    std::shared_ptr<Module> model = SmallModel();
    auto zero = ZeroRedundancyOptimizer::Create(model->Parameters(), &group, Options(ZeroInnerOptimizer::kAdam));
    ASSERT_TRUE(zero.ok());
    OptimizerState wrong_shape;
    wrong_shape.tensors.emplace_back("0.exp_avg", Zeros({3}));
    EXPECT_FALSE((*zero)->LoadStateDict(wrong_shape).ok());
    OptimizerState no_param;
    no_param.tensors.emplace_back("9.exp_avg", Zeros({3}));
    EXPECT_FALSE((*zero)->LoadStateDict(no_param).ok());
  });
}

// Clipping under ZeRO (squared norms of the shards summed across ranks) equals one process on the
// joint batch with the unsharded clip; a max_norm far below the gradient norm makes every step clip.
TEST(ZeroClipTest, MatchesOneProcessOnTheJointBatch) {
  const int world = 3, steps = 8;
  const double max_norm = 0.05;
  const ZeroOptions options = Options(ZeroInnerOptimizer::kAdam);
  std::shared_ptr<Module> reference = SmallModel();
  std::unique_ptr<Optimizer> reference_opt = Unsharded(reference->Parameters(), options);
  std::vector<double> reference_norms;
  for (int s = 0; s < steps; ++s) {
    reference->ZeroGrad();
    std::vector<Tensor> xs, ys;
    for (int r = 0; r < world; ++r) {
      const Batch b = RankBatch(s, r);
      xs.push_back(b.x);
      ys.push_back(b.y);
    }
    CrossEntropy(reference->Forward(Cat(xs, 0)), Cat(ys, 0)).Backward();
    auto norm = ClipGradNorm(reference->Parameters(), max_norm);
    ASSERT_TRUE(norm.ok());
    reference_norms.push_back(*norm);
    reference_opt->Step();
  }
  ASSERT_GT(reference_norms.back(), 2 * max_norm) << "the test needs clipping to be active";
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    auto ddp = DistributedDataParallel::Create(SmallModel(), &group);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto zero = ZeroRedundancyOptimizer::Create((*ddp)->Parameters(), &group, options);
    ASSERT_TRUE(zero.ok());
    for (int s = 0; s < steps; ++s) {
      (*ddp)->ZeroGrad();
      const Batch batch = RankBatch(s, rank);
      CrossEntropy((*ddp)->Forward(batch.x), batch.y).Backward();
      ASSERT_TRUE((*ddp)->status().ok());
      auto norm = (*zero)->ClipGradNorm(max_norm);
      ASSERT_TRUE(norm.ok()) << norm.status();
      EXPECT_NEAR(*norm, reference_norms[s], 1e-5 * reference_norms[s]) << "step " << s << " rank " << rank;
      ASSERT_TRUE((*zero)->TryStep().ok());
    }
    const std::vector<Tensor> params = (*ddp)->Parameters(), expected = reference->Parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_LE(MaxAbsDiff(params[i], expected[i]), 1e-5f) << "rank " << rank << " parameter " << i;
    }
  });
}

// The local norm of a shard is not the global norm: the trap the summed squared norms avoid.
TEST(ZeroClipTest, ShardNormIsGlobal) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    std::vector<Tensor> params = {Zeros({4})};
    params[0].set_requires_grad(true);
    params[0].set_grad(FromVector(std::vector<float>{3, 0, 0, 4}, {4}));  // rank 0 holds 3, 0; rank 1: 0, 4
    auto zero = ZeroRedundancyOptimizer::Create(params, &group, Options(ZeroInnerOptimizer::kSgd));
    ASSERT_TRUE(zero.ok());
    auto norm = (*zero)->ClipGradNorm(1.0);
    ASSERT_TRUE(norm.ok());
    EXPECT_DOUBLE_EQ(*norm, 5.0) << "rank " << rank;
  });
}

// The reduce-scatter hook: with shards following the buckets (rebuild off) every bucket is
// reduce-scattered; with one flat group and the rebuild on, the first steps all-reduce and the optimizer
// re-shards to the buckets the hook saw, then reduce-scatters. Both equal DDP + Adam.
class ZeroHookTest : public ::testing::TestWithParam<bool> {};

TEST_P(ZeroHookTest, MatchesUnshardedAdam) {
  const bool follow_rebuild = GetParam();
  const int world = 3, steps = 15;
  const ZeroOptions options = Options(ZeroInnerOptimizer::kAdam);
  DdpOptions ddp_options;
  ddp_options.reducer.caps.first_bucket_cap_bytes = 200;  // several buckets for 195 parameters
  ddp_options.reducer.caps.bucket_cap_bytes = 400;
  ddp_options.reducer.rebuild_buckets = follow_rebuild;
  std::vector<Tensor> reference;
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    auto ddp = DistributedDataParallel::Create(SmallModel(), &group, ddp_options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    std::unique_ptr<Optimizer> plain = Unsharded((*ddp)->Parameters(), options);
    Train(**ddp, plain.get(), nullptr, rank, 0, steps);
    if (rank == 0) reference = CloneAll((*ddp)->Parameters());
  });
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    auto ddp = DistributedDataParallel::Create(SmallModel(), &group, ddp_options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ZeroOptions zero_options = options;
    if (!follow_rebuild) zero_options.groups = (*ddp)->reducer().bucket_assignment();
    auto zero = ZeroRedundancyOptimizer::Create((*ddp)->Parameters(), &group, zero_options);
    ASSERT_TRUE(zero.ok());
    ASSERT_TRUE((*ddp)->RegisterCommHook(MakeZeroReduceScatterHook(**zero)).ok());
    ASSERT_GT((*ddp)->reducer().bucket_assignment().size(), 1u);
    std::shared_ptr<ZeroHookShared> shared = (*zero)->hook_shared();
    for (int s = 0; s < steps; ++s) {
      (*ddp)->ZeroGrad();
      const Batch batch = RankBatch(s, rank);
      CrossEntropy((*ddp)->Forward(batch.x), batch.y).Backward();
      ASSERT_TRUE((*ddp)->status().ok()) << (*ddp)->status();
      bool mismatched = false;
      {
        std::lock_guard<std::mutex> lock(shared->mu);
        mismatched = shared->mismatched;
      }
      // From the third step on (after the rebuild and the re-shard) every bucket is reduce-scattered.
      if (s >= 2) {
        EXPECT_FALSE(mismatched) << "step " << s;
      }
      if (follow_rebuild && s == 0) {
        EXPECT_TRUE(mismatched) << "one flat group is not the buckets";
      }
      ASSERT_TRUE((*zero)->TryStep().ok());
    }
    std::vector<std::vector<size_t>> groups;
    for (const ZeroGroupLayout& g : (*zero)->layout()) groups.push_back(g.params);
    std::vector<std::vector<size_t>> buckets = (*ddp)->reducer().bucket_assignment();
    std::sort(groups.begin(), groups.end());
    std::sort(buckets.begin(), buckets.end());
    EXPECT_EQ(groups, buckets) << "the shards follow the buckets";
    const std::vector<Tensor> params = (*ddp)->Parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_LE(MaxAbsDiff(params[i], reference[i]), 1e-6f) << "rank " << rank << " parameter " << i;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Zero, ZeroHookTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "flat_then_rebuilt_buckets" : "bucket_groups");
                         });

}  // namespace
}  // namespace ddp
