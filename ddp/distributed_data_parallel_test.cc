// DDP against one process on the concatenated batch, ranks as threads over Gloo.
#include "ddp/distributed_data_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "comm/gloo/process_group_gloo.h"
#include "ddp/sync_batch_norm.h"
#include "nn/clip_grad.h"
#include "nn/layers.h"
#include "nn/models.h"
#include "nn/sgd.h"
#include "store/memory_store.h"
#include "tensor/conv_onednn.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/image_batches.h"
#include "testing/run_ranks.h"
#include "testing/tensor_agreement.h"

namespace ddp {
namespace {

using Batch = ImageBatch;
Batch GlobalBatch(int step, int64_t rows) { return RandomImageBatch(500 + step, rows); }

std::shared_ptr<Module> Model(const std::string& name) {
  Generator g(42);
  return *MakeModel(name, g);
}

struct Case {
  std::string model;
  int world;
  size_t cap;
  bool bucket_view;
  bool rebuild;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat(c.model, "_w", c.world, "_cap", c.cap, c.bucket_view ? "_view" : "", c.rebuild ? "_rebuild" : "");
}

// The convolutions run oneDNN's direct primitives: the engine's own Winograd (CPUs without AVX-512,
// tensor/conv_winograd.h) rounds at about 1e-5 of its outputs' magnitude, in an order that depends on how
// many images one call holds, so a rank's share of the batch and the whole batch may differ by as much as
// this test's bound. What the test bounds is DDP's own arithmetic (buckets, averaging, SyncBatchNorm).
class DdpParityTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { cpu::SetConvKernel(cpu::ConvKernel::kOneDnn); }
  void TearDown() override { cpu::SetConvKernel(cpu::ConvKernel::kAuto); }
};

// Gradients of every step and parameters after 5 SGD steps equal one process on the concatenated
// batch. cnn_bn runs with SyncBatchNorm2d, which makes per-rank batch statistics global.
TEST_P(DdpParityTest, MatchesOneProcessOnTheConcatenatedBatch) {
  const Case c = GetParam();
  const int steps = 5;
  const int64_t per_rank = 2;
  SgdOptions sgd;
  sgd.lr = 0.05f;
  sgd.momentum = 0.9f;
  std::shared_ptr<Module> reference = Model(c.model);
  Sgd reference_opt(reference->Parameters(), sgd);
  std::vector<NamedTensors> reference_grads;
  for (int s = 0; s < steps; ++s) {
    reference->ZeroGrad();
    Batch batch = GlobalBatch(s, c.world * per_rank);
    CrossEntropy(reference->Forward(batch.x), batch.y).Backward();
    NamedTensors grads;
    for (const auto& [name, p] : reference->NamedParameters()) grads.emplace_back(name, Clone(p.grad()));
    reference_grads.push_back(grads);
    reference_opt.Step();
  }
  RunRanks(c.world, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<Module> model = Model(c.model);
    if (c.model == "cnn_bn") {
      ASSERT_EQ(ConvertSyncBatchNorm(*model, &group), 2);
    }
    DdpOptions options;
    options.reducer.caps.first_bucket_cap_bytes = c.cap;
    options.reducer.caps.bucket_cap_bytes = c.cap;
    options.reducer.gradient_as_bucket_view = c.bucket_view;
    options.reducer.rebuild_buckets = c.rebuild;
    auto ddp = DistributedDataParallel::Create(model, &group, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    Sgd opt(model->Parameters(), sgd);
    for (int s = 0; s < steps; ++s) {
      model->ZeroGrad();
      Batch shard = ShardOf(GlobalBatch(s, c.world * per_rank), rank, per_rank);
      CrossEntropy((*ddp)->Forward(shard.x), shard.y).Backward();
      ASSERT_TRUE((*ddp)->status().ok()) << (*ddp)->status();
      NamedTensors params = model->NamedParameters();
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_TRUE(Agree(params[i].second.grad(), reference_grads[s][i].second))
            << params[i].first << " step " << s << " rank " << rank;
      }
      opt.Step();
    }
    NamedTensors final_params = model->NamedParameters(), want = reference->NamedParameters();
    for (size_t i = 0; i < final_params.size(); ++i) {
      EXPECT_TRUE(Agree(final_params[i].second, want[i].second)) << final_params[i].first;
    }
    if (c.model == "cnn_bn") {  // SyncBatchNorm's running statistics are the global batch's too
      for (const char* bn : {"bn1", "bn2"}) {
        for (const char* buffer : {"running_mean", "running_var"}) {
          EXPECT_TRUE(Agree(model->Child(bn)->GetBuffer(buffer), reference->Child(bn)->GetBuffer(buffer)))
              << bn << "." << buffer;
        }
      }
    }
  });
}

std::vector<Case> ParityCases() {
  std::vector<Case> cases;
  const size_t caps[] = {0, 4 << 10, 1 << 20, 25 << 20};
  int k = 0;
  for (const char* model : {"mlp", "cnn", "cnn_bn"}) {
    for (int world : {2, 3, 4}) {
      for (int j = 0; j < 2; ++j, ++k) {  // two option sets per (model, world), rotating through the caps
        cases.push_back({model, world, caps[k % 4], (k / 2) % 2 == 1, k % 3 != 2});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Models, DdpParityTest, ::testing::ValuesIn(ParityCases()), CaseName);

TEST(DdpTest, WrapBroadcastsRankZeroState) {
  RunRanks(3, [&](int rank, ProcessGroup& group) {
    Generator g(rank);  // different initialisation on every rank
    std::shared_ptr<Module> model = *MakeModel("cnn_bn", g);
    auto ddp = DistributedDataParallel::Create(model, &group);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    std::shared_ptr<Module> rank0 = Model("cnn_bn");
    Generator g0(0);
    rank0 = *MakeModel("cnn_bn", g0);
    NamedTensors mine = model->StateDict(), want = rank0->StateDict();
    for (size_t i = 0; i < mine.size(); ++i) {
      if (mine[i].second.dtype() != DType::kFloat32) continue;
      EXPECT_EQ(mine[i].second.ToVector<float>(), want[i].second.ToVector<float>()) << mine[i].first;
    }
    EXPECT_EQ((*ddp)->NamedParameters()[0].first, "module.conv1.weight");
  });
}

TEST(DdpTest, BuffersFollowRankZeroBeforeEachForward) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<Module> model = Model("cnn_bn");
    auto ddp = DistributedDataParallel::Create(model, &group);
    ASSERT_TRUE(ddp.ok());
    Batch own = ShardOf(GlobalBatch(0, 4), rank, 2);
    CrossEntropy((*ddp)->Forward(own.x), own.y).Backward();  // running stats now differ per rank
    Batch same = GlobalBatch(1, 2);
    CrossEntropy((*ddp)->Forward(same.x), same.y).Backward();  // rank 0's stats, then the same update
    std::vector<std::string> all;
    const std::vector<float> mean = model->Child("bn2")->GetBuffer("running_mean").ToVector<float>();
    ASSERT_TRUE(group.AllGatherObject(std::string(reinterpret_cast<const char*>(mean.data()), mean.size() * 4), &all).ok());
    EXPECT_EQ(all[0], all[1]);
  });
}

TEST(DdpTest, MismatchedModelsNameTheParameterAndRanks) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<Module> model = Model(rank == 1 ? "cnn" : "mlp");
    auto ddp = DistributedDataParallel::Create(model, &group);
    ASSERT_FALSE(ddp.ok());
    EXPECT_NE(ddp.status().message().find("rank 0 has parameter fc1.weight [512, 784]"), std::string::npos)
        << ddp.status();
    EXPECT_NE(ddp.status().message().find("rank 1 has parameter conv1.weight"), std::string::npos) << ddp.status();
  });
}

// Ranks started with different bucket caps (or hooks) fail at wrap time naming the setting and each
// rank's value, before any bucket is reduced (Note [DDP settings agreement]).
TEST(DdpTest, MismatchedSettingsAreNamedAtWrapTime) {
  RunRanks(3, [&](int rank, ProcessGroup& group) {
    DdpOptions options;
    if (rank == 1) options.reducer.caps.bucket_cap_bytes = 0;
    auto ddp = DistributedDataParallel::Create(Model("mlp"), &group, options);
    ASSERT_FALSE(ddp.ok());
    EXPECT_EQ(ddp.status().message(),
              "DDP settings differ across ranks: bucket_cap_bytes is 26214400 on ranks 0, 2 and 0 on rank 1");
  });
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    DdpOptions options;
    options.reducer.find_unused_parameters = rank == 0;
    auto ddp = DistributedDataParallel::Create(Model("mlp"), &group, options);
    EXPECT_EQ(ddp.status().message(),
              "DDP settings differ across ranks: find_unused_parameters is true on rank 0 and false on rank 1");
  });
}

// RegisterCommHook: before the first forward only, agreed across ranks by the hook's name().
TEST(DdpTest, RegisterCommHookIsAgreedAndOnlyBeforeTheFirstForward) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    auto ddp = DistributedDataParallel::Create(Model("mlp"), &group);
    ASSERT_TRUE(ddp.ok());
    PowerSgdOptions powersgd;
    powersgd.matrix_approximation_rank = rank == 0 ? 1 : 2;
    const absl::Status mismatch = (*ddp)->RegisterCommHook(*MakeCommHook("powersgd", powersgd));
    EXPECT_NE(mismatch.message().find("comm_hook is powersgd(rank=1"), std::string::npos) << mismatch;
    powersgd.matrix_approximation_rank = 2;
    ASSERT_TRUE((*ddp)->RegisterCommHook(*MakeCommHook("powersgd", powersgd)).ok());
    EXPECT_EQ((*ddp)->reducer().comm_hook().name().rfind("powersgd(rank=2", 0), 0u);
    Batch own = ShardOf(GlobalBatch(0, 4), rank, 2);
    CrossEntropy((*ddp)->Forward(own.x), own.y).Backward();
    ASSERT_TRUE((*ddp)->status().ok());
    EXPECT_TRUE(absl::IsFailedPrecondition((*ddp)->RegisterCommHook(*MakeCommHook("fp16"))));
  });
}

// Clipping by global norm after DDP's averaging equals clipping one process's gradients of the joint
// batch (the averaged gradients are identical on every rank, so no rank needs to communicate).
TEST(DdpTest, GlobalNormClippingEqualsOneProcessOnTheJointBatch) {
  const int world = 2;
  const int64_t per_rank = 4;
  const double max_norm = 0.05;  // small enough to clip
  SgdOptions sgd;
  sgd.lr = 0.1f;
  std::shared_ptr<Module> reference = Model("mlp");
  Sgd reference_opt(reference->Parameters(), sgd);
  double reference_norm = 0;
  for (int s = 0; s < 3; ++s) {
    reference->ZeroGrad();
    Batch batch = GlobalBatch(s, world * per_rank);
    CrossEntropy(reference->Forward(batch.x), batch.y).Backward();
    reference_norm = ClipGradNorm(reference->Parameters(), max_norm).value();
    reference_opt.Step();
  }
  ASSERT_GT(reference_norm, max_norm);
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<Module> model = Model("mlp");
    auto ddp = DistributedDataParallel::Create(model, &group);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    Sgd opt(model->Parameters(), sgd);
    double norm = 0;
    for (int s = 0; s < 3; ++s) {
      model->ZeroGrad();
      Batch shard = ShardOf(GlobalBatch(s, world * per_rank), rank, per_rank);
      CrossEntropy((*ddp)->Forward(shard.x), shard.y).Backward();
      ASSERT_TRUE((*ddp)->status().ok());
      norm = ClipGradNorm(model->Parameters(), max_norm).value();
      opt.Step();
    }
    EXPECT_NEAR(norm, reference_norm, 1e-5 * reference_norm);
    NamedTensors got = model->NamedParameters(), want = reference->NamedParameters();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(Agree(got[i].second, want[i].second)) << got[i].first;
  });
}

TEST(DdpTest, NoSyncAccumulatesLocallyThenSynchronises) {
  const int world = 2, k = 2;
  const int64_t per_rank = 2;
  std::shared_ptr<Module> reference = Model("mlp");
  Batch all = GlobalBatch(0, k * world * per_rank);
  MulScalar(CrossEntropy(reference->Forward(all.x), all.y), 1.0f).Backward();
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<Module> model = Model("mlp");
    auto ddp = DistributedDataParallel::Create(model, &group);
    ASSERT_TRUE(ddp.ok());
    for (int step = 0; step < k; ++step) {
      Batch micro{Contiguous(Narrow(all.x, 0, step * world * per_rank, world * per_rank)),
                  Contiguous(Narrow(all.y, 0, step * world * per_rank, world * per_rank))};
      Batch mine = ShardOf(micro, rank, per_rank);
      if (step < k - 1) {
        auto guard = (*ddp)->NoSync();
        MulScalar(CrossEntropy((*ddp)->Forward(mine.x), mine.y), 1.0f / k).Backward();
      } else {
        MulScalar(CrossEntropy((*ddp)->Forward(mine.x), mine.y), 1.0f / k).Backward();
      }
    }
    ASSERT_TRUE((*ddp)->status().ok());
    NamedTensors got = model->NamedParameters(), want = reference->NamedParameters();
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(Agree(got[i].second.grad(), want[i].second.grad())) << got[i].first;
    }
    EXPECT_EQ((*ddp)->reducer().stats().size(), 1u);  // only the synchronised pass communicated
  });
}

// fc maps images to logits; head is never used, so its parameters get no gradient.
class NetWithUnusedHead : public Module {
 public:
  explicit NetWithUnusedHead(Generator& g) : Module("NetWithUnusedHead") {
    RegisterModule("fc", std::make_shared<nn::Linear>(784, 10, g));
    RegisterModule("head", std::make_shared<nn::Linear>(10, 10, g));
  }
  Tensor Forward(const Tensor& x) override { return Child("fc")->Forward(Flatten(x)); }
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }
};

// Finalize runs at the end of backward and cannot return its error: status() has it right after
// backward, and the next TryForward returns it.
TEST(DdpTest, FinalizeErrorsSurfaceInStatusThenInTryForward) {
  for (const bool find_unused : {false, true}) {
    RunRanks(2, [&](int rank, ProcessGroup& group) {
      Generator g(3);
      auto model = std::make_shared<NetWithUnusedHead>(g);
      DdpOptions options;
      options.reducer.find_unused_parameters = find_unused;
      auto ddp = DistributedDataParallel::Create(model, &group, options);
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      Batch mine = ShardOf(GlobalBatch(0, 4), rank, 2);
      CrossEntropy((*ddp)->Forward(mine.x), mine.y).Backward();
      absl::StatusOr<Tensor> next = (*ddp)->TryForward(mine.x);
      if (find_unused) {
        EXPECT_TRUE((*ddp)->status().ok()) << (*ddp)->status();
        EXPECT_TRUE(next.ok()) << next.status();
        return;
      }
      EXPECT_NE((*ddp)->status().message().find("head.weight"), std::string::npos) << (*ddp)->status();
      ASSERT_FALSE(next.ok());
      EXPECT_EQ(next.status(), (*ddp)->status());
    });
  }
}

}  // namespace
}  // namespace ddp
