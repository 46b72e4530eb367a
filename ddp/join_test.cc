// Join (uneven inputs): rank r trains kSteps - r * kDrop steps. The result must equal one process that
// at each step averages, over the initial world size (or over the ranks still training), the gradients
// of the ranks that still had data; every rank must end with the same model; nothing hangs.
#include "ddp/join.h"

#include <gtest/gtest.h>

#include <string>

#include "ddp/desync_check.h"
#include "gmock/gmock.h"
#include "nn/models.h"
#include "nn/sgd.h"
#include "tensor/autograd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/run_ranks.h"
#include "testing/tensor_agreement.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 5;
constexpr int kDrop = 2;
constexpr int64_t kRows = 3;

int StepsOf(int rank) { return kSteps - rank * kDrop; }

struct Batch {
  Tensor x, y;
};
Batch BatchOf(int rank, int step) {
  Generator g(700 + 31 * rank + step);
  std::vector<int64_t> labels(kRows);
  for (auto& l : labels) l = static_cast<int64_t>(g.RandomIndex(10));
  return {Normal({kRows, 1, 28, 28}, 0.0f, 1.0f, g), FromVector(labels, {kRows})};
}

std::shared_ptr<Module> Model(const std::string& name) {
  Generator g(42);
  return *MakeModel(name, g);
}

SgdOptions Sgd01() {
  SgdOptions sgd;
  sgd.lr = 0.1f;
  return sgd;
}

// One process: at step s, the gradients of the ranks with a batch at s, summed and divided by
// `initial_world` (or by how many ranks had one).
std::shared_ptr<Module> Reference(int world, bool divide_by_initial_world_size) {
  std::shared_ptr<Module> model = Model("mlp");
  const NamedTensors params = model->NamedParameters();
  for (int s = 0; s < StepsOf(0); ++s) {
    std::vector<Tensor> sum;
    int training = 0;
    for (int r = 0; r < world; ++r) {
      if (s >= StepsOf(r)) continue;
      ++training;
      model->ZeroGrad();
      const Batch b = BatchOf(r, s);
      CrossEntropy(model->Forward(b.x), b.y).Backward();
      for (size_t i = 0; i < params.size(); ++i) {
        if (sum.size() <= i) sum.push_back(Clone(params[i].second.grad()));
        else sum[i] = Add(sum[i], params[i].second.grad());
      }
    }
    const float divisor = static_cast<float>(divide_by_initial_world_size ? world : training);
    NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      CopyInPlace(params[i].second, Sub(params[i].second, MulScalar(sum[i], Sgd01().lr / divisor)));
    }
  }
  return model;
}

// Trains rank `rank`'s uneven share inside a Join; returns Finish's status.
absl::Status TrainUneven(int rank, ProcessGroup& group, const std::shared_ptr<Module>& model, DdpOptions ddp_options,
                         JoinOptions join_options, int* last_joiner = nullptr) {
  auto ddp = DistributedDataParallel::Create(model, &group, ddp_options);
  if (!ddp.ok()) return ddp.status();
  Sgd opt(model->Parameters(), Sgd01());
  Join join(ddp->get(), join_options);
  for (int s = 0; s < StepsOf(rank); ++s) {
    model->ZeroGrad();
    const Batch b = BatchOf(rank, s);
    absl::StatusOr<Tensor> out = (*ddp)->TryForward(b.x);
    if (!out.ok()) {
      EXPECT_EQ(join.Finish(), out.status());  // communicates nothing after a failed announcement
      return out.status();
    }
    CrossEntropy(*out, b.y).Backward();
    if (!(*ddp)->status().ok()) return (*ddp)->status();
    opt.Step();
  }
  const absl::Status finished = join.Finish();
  if (last_joiner != nullptr) *last_joiner = join.last_joiner();
  return finished;
}

void ExpectModelsAgree(const Module& got, const Module& want, int rank) {
  const NamedTensors a = got.NamedParameters(), b = want.NamedParameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(Agree(a[i].second, b[i].second)) << a[i].first << " rank " << rank;
}

class JoinTest : public ::testing::TestWithParam<int> {};

TEST_P(JoinTest, EqualsOneProcessAveragingOverTheInitialWorldSize) {
  const int world = GetParam();
  std::shared_ptr<Module> want = Reference(world, /*divide_by_initial_world_size=*/true);
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<Module> model = Model("mlp");
    int last_joiner = -2;
    const absl::Status status = TrainUneven(rank, group, model, DdpOptions{}, JoinOptions{}, &last_joiner);
    ASSERT_TRUE(status.ok()) << "rank " << rank << ": " << status;
    EXPECT_EQ(last_joiner, 0);  // rank 0 has the most batches
    ExpectModelsAgree(*model, *want, rank);
  });
}

TEST_P(JoinTest, AveragesOverTheRanksStillTraining) {
  const int world = GetParam();
  std::shared_ptr<Module> want = Reference(world, /*divide_by_initial_world_size=*/false);
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<Module> model = Model("mlp");
    JoinOptions join;
    join.divide_by_initial_world_size = false;
    DdpOptions options;
    options.reducer.caps.bucket_cap_bytes = 0;  // a bucket per parameter: every bucket is shadowed
    options.reducer.find_unused_parameters = true;  // the used map is shadowed too
    const absl::Status status = TrainUneven(rank, group, model, options, join);
    ASSERT_TRUE(status.ok()) << "rank " << rank << ": " << status;
    ExpectModelsAgree(*model, *want, rank);
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, JoinTest, ::testing::Values(2, 3));

// BatchNorm buffers are broadcast in every forward and shadowed; at the end every rank holds the same
// parameters and buffers (the last joiner's).
TEST(JoinTest, BuffersAreShadowedAndEveryReplicaEndsIdentical) {
  RunRanks(3, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<Module> model = Model("cnn_bn");
    ASSERT_TRUE(TrainUneven(rank, group, model, DdpOptions{}, JoinOptions{}).ok());
    const absl::Status in_sync = CheckReplicasInSync(*model, group);
    EXPECT_TRUE(in_sync.ok()) << "rank " << rank << ": " << in_sync;
  });
}

TEST(JoinTest, ThrowOnEarlyTerminationFailsEveryRankNamingTheOneThatRanOut) {
  RunRanks(3, [&](int rank, ProcessGroup& group) {
    JoinOptions join;
    join.throw_on_early_termination = true;
    const absl::Status status = TrainUneven(rank, group, Model("mlp"), DdpOptions{}, join);
    EXPECT_TRUE(absl::IsFailedPrecondition(status)) << "rank " << rank << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("rank 2 ran out of data while 2 still had batches"));
  });
}

// A stop request rides on the announcement: every rank still training sees it after the same forward.
TEST(JoinTest, StopRequestsAreAgreedInTheSameStep) {
  RunRanks(3, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<Module> model = Model("mlp");
    auto ddp = DistributedDataParallel::Create(model, &group);
    ASSERT_TRUE(ddp.ok());
    Join join(ddp->get());
    std::vector<bool> agreed;
    for (int s = 0; s < 3; ++s) {
      join.set_stop_requested(rank == 1 && s == 1);
      const Batch b = BatchOf(rank, s);
      CrossEntropy((*ddp)->Forward(b.x), b.y).Backward();
      agreed.push_back(join.stop_agreed());
    }
    EXPECT_EQ(agreed, (std::vector<bool>{false, true, false})) << "rank " << rank;
    EXPECT_TRUE(join.Finish().ok());
  });
}

TEST(JoinTest, DisabledJoinAnnouncesNothing) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<Module> model = Model("mlp");
    auto ddp = DistributedDataParallel::Create(model, &group);
    ASSERT_TRUE(ddp.ok());
    JoinOptions off;
    off.enable = false;
    Join join(ddp->get(), off);
    const Batch b = BatchOf(0, 0);
    CrossEntropy((*ddp)->Forward(b.x), b.y).Backward();  // the same steps on both ranks
    EXPECT_TRUE((*ddp)->status().ok());
    EXPECT_TRUE(join.Finish().ok());
    EXPECT_EQ(join.last_joiner(), -1);
  });
}

}  // namespace
}  // namespace ddp
