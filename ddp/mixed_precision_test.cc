// DDP's mixed_precision options: which combinations are refused and why, and a 2-rank run with bfloat16
// reduction against one float32 process within the rounding bound of Note [Reduce dtype rounding].
#include "ddp/mixed_precision.h"

#include <gtest/gtest.h>

#include <cmath>

#include "absl/strings/match.h"
#include "ddp/distributed_data_parallel.h"
#include "nn/models.h"
#include "nn/sgd.h"
#include "reducer/comm_hook.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/image_batches.h"
#include "testing/run_ranks.h"

namespace ddp {
namespace {

std::shared_ptr<Module> Mlp() {
  Generator g(42);
  return *MakeModel("mlp", g);
}

using Batch = ImageBatch;
Batch GlobalBatch(int step, int64_t rows) { return RandomImageBatch(700 + step, rows); }

DdpMixedPrecision Bf16Reduce() {
  DdpMixedPrecision mp;
  mp.reduce_dtype = DType::kBFloat16;
  return mp;
}

TEST(DdpMixedPrecisionTest, RefusesWhatWouldConvertTwiceOrIsNotImplemented) {
  ReducerOptions reducer;
  EXPECT_TRUE(CheckDdpMixedPrecision(Bf16Reduce(), reducer).ok());
  EXPECT_TRUE(CheckDdpMixedPrecision(DdpMixedPrecision{}, reducer).ok());
  reducer.comm_hook = *MakeCommHook("allreduce");
  EXPECT_TRUE(CheckDdpMixedPrecision(Bf16Reduce(), reducer).ok());
  for (const char* hook : {"bf16", "fp16"}) {
    reducer.comm_hook = *MakeCommHook(hook);
    const absl::Status status = CheckDdpMixedPrecision(Bf16Reduce(), reducer);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << hook;
    EXPECT_TRUE(absl::StrContains(status.message(), absl::StrCat("\"", hook, "\""))) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "second time")) << status;
    // With float32 buckets the compression hooks are what they always were.
    EXPECT_TRUE(CheckDdpMixedPrecision(DdpMixedPrecision{}, reducer).ok()) << hook;
  }
  reducer.comm_hook = *MakeCommHook("powersgd");
  EXPECT_TRUE(absl::StrContains(CheckDdpMixedPrecision(Bf16Reduce(), reducer).message(), "powersgd"));
  reducer.comm_hook = nullptr;
  reducer.gradient_as_bucket_view = true;
  EXPECT_TRUE(absl::StrContains(CheckDdpMixedPrecision(Bf16Reduce(), reducer).message(),
                                "gradient_as_bucket_view"));
  reducer.gradient_as_bucket_view = false;
  DdpMixedPrecision params_bf16;
  params_bf16.param_dtype = DType::kBFloat16;
  EXPECT_TRUE(absl::StrContains(CheckDdpMixedPrecision(params_bf16, reducer).message(), "param_dtype"));
  DdpMixedPrecision buffers_fp16;
  buffers_fp16.buffer_dtype = DType::kFloat16;
  EXPECT_TRUE(absl::StrContains(CheckDdpMixedPrecision(buffers_fp16, reducer).message(), "buffer_dtype"));
  DdpMixedPrecision reduce_fp16;
  reduce_fp16.reduce_dtype = DType::kFloat16;
  EXPECT_TRUE(absl::StrContains(CheckDdpMixedPrecision(reduce_fp16, reducer).message(), "float16"));
}

TEST(DdpMixedPrecisionTest, CreateAndRegisterCommHookRefuseTheBf16HookOnBf16Buckets) {
  RunRanks(2, [&](int, ProcessGroup& group) {
    DdpOptions options;
    options.mixed_precision = Bf16Reduce();
    options.reducer.comm_hook = *MakeCommHook("bf16");
    auto refused = DistributedDataParallel::Create(Mlp(), &group, options);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    options.reducer.comm_hook = nullptr;
    auto ddp = DistributedDataParallel::Create(Mlp(), &group, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    EXPECT_EQ((*ddp)->RegisterCommHook(*MakeCommHook("bf16")).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE((*ddp)->RegisterCommHook(*MakeCommHook("allreduce")).ok());
  });
}

TEST(DdpMixedPrecisionTest, RanksMustAgreeOnTheReduceDtype) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    DdpOptions options;
    if (rank == 1) options.mixed_precision = Bf16Reduce();
    auto ddp = DistributedDataParallel::Create(Mlp(), &group, options);
    ASSERT_FALSE(ddp.ok());
    EXPECT_TRUE(absl::StrContains(ddp.status().message(), "reduce_dtype")) << ddp.status();
  });
}

// Two ranks reducing in bfloat16 against one float32 process on the concatenated batch. Every step's
// averaged gradient g = (g_0 + g_1) / 2 (rank r's own g_r, computed by the reference on r's shard) is
// within the bound of Note [Reduce dtype rounding]: |g_bf16 - g| <= 2^-7 (|g_0| + |g_1|) / 2 (a rounding
// of each half and of their sum, 2^-8 each); parameters after 5 SGD steps (lr 0.05, momentum 0.9) differ
// by less than 1e-3, where the float32 reduction agrees to 1e-6.
TEST(DdpMixedPrecisionTest, TwoRanksBf16ReductionMatchesOneProcessWithinTheRoundingBound) {
  constexpr int kSteps = 5;
  constexpr int64_t kPerRank = 4;
  SgdOptions sgd;
  sgd.lr = 0.05f;
  sgd.momentum = 0.9f;
  std::shared_ptr<Module> reference = Mlp();
  Sgd reference_opt(reference->Parameters(), sgd);
  std::vector<std::vector<std::vector<float>>> shard_grads[2];  // [rank][step][param]
  std::vector<std::vector<std::vector<float>>> mean_grads;      // [step][param]
  for (int s = 0; s < kSteps; ++s) {
    for (int r = 0; r < 2; ++r) {
      reference->ZeroGrad();
      const Batch shard = ShardOf(GlobalBatch(s, 2 * kPerRank), r, kPerRank);
      CrossEntropy(reference->Forward(shard.x), shard.y).Backward();
      std::vector<std::vector<float>> grads;
      for (const Tensor& p : reference->Parameters()) grads.push_back(p.grad().ToVector<float>());
      shard_grads[r].push_back(grads);
    }
    reference->ZeroGrad();
    const Batch batch = GlobalBatch(s, 2 * kPerRank);
    CrossEntropy(reference->Forward(batch.x), batch.y).Backward();
    std::vector<std::vector<float>> grads;
    for (const Tensor& p : reference->Parameters()) grads.push_back(p.grad().ToVector<float>());
    mean_grads.push_back(grads);
    reference_opt.Step();
  }
  const std::vector<Tensor> want = reference->Parameters();
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<Module> model = Mlp();
    DdpOptions options;
    options.mixed_precision = Bf16Reduce();
    auto ddp = DistributedDataParallel::Create(model, &group, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    Sgd opt(model->Parameters(), sgd);
    for (int s = 0; s < kSteps; ++s) {
      model->ZeroGrad();
      const Batch shard = ShardOf(GlobalBatch(s, 2 * kPerRank), rank, kPerRank);
      CrossEntropy((*ddp)->Forward(shard.x), shard.y).Backward();
      ASSERT_TRUE((*ddp)->status().ok()) << (*ddp)->status();
      if (s == 0) {  // the same weights as the reference: the bound holds element for element
        const std::vector<Tensor> params = model->Parameters();
        for (size_t i = 0; i < params.size(); ++i) {
          const std::vector<float> got = params[i].grad().ToVector<float>();
          int64_t over = 0;
          for (size_t j = 0; j < got.size(); ++j) {
            const double bound = std::ldexp(1.0, -7) * (std::abs(shard_grads[0][s][i][j]) +
                                                        std::abs(shard_grads[1][s][i][j])) / 2;
            // The reference's full-batch float32 gradient itself differs from (g_0 + g_1) / 2 by float32 rounding.
            over += std::abs(got[j] - mean_grads[s][i][j]) > bound + 1e-6 * std::abs(mean_grads[s][i][j]) + 1e-9;
          }
          EXPECT_EQ(over, 0) << "parameter " << i << " rank " << rank;
        }
      }
      opt.Step();
    }
    const std::vector<Tensor> got = model->Parameters();
    float worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const std::vector<float> a = got[i].ToVector<float>(), b = want[i].ToVector<float>();
      for (size_t j = 0; j < a.size(); ++j) worst = std::max(worst, std::abs(a[j] - b[j]));
    }
    EXPECT_LT(worst, 1e-3f) << "rank " << rank;
    EXPECT_GT(worst, 0.0f) << "the bfloat16 reduction should leave a trace in the parameters";
  });
}

}  // namespace
}  // namespace ddp
