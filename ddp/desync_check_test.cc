#include "ddp/desync_check.h"

#include <gtest/gtest.h>

#include <string>

#include "testing/run_ranks.h"
#include "gmock/gmock.h"
#include "nn/models.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<Module> Model() {
  Generator g(7);
  auto model = MakeModel("cnn_bn", g);
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

// Adds 1 to the first element of the state tensor called `name`.
void Perturb(const Module& model, const std::string& name) {
  for (const auto& [n, t] : model.StateDict()) {
    if (n != name) continue;
    if (t.dtype() == DType::kInt64) {
      t.data<int64_t>()[0] += 1;
    } else {
      t.data<float>()[0] += 1.0f;
    }
    return;
  }
  ADD_FAILURE() << "no tensor " << name;
}

TEST(DesyncCheckTest, ChecksumsSeeEveryByte) {
  auto a = Model();
  auto b = Model();
  EXPECT_EQ(StateChecksums(*a), StateChecksums(*b));
  const std::string name = a->NamedParameters().back().first;
  Perturb(*b, name);
  EXPECT_NE(StateChecksums(*a), StateChecksums(*b));
}

TEST(DesyncCheckTest, InSyncReplicasPass) {
  RunRanks(3, [&](int rank, ProcessGroup& group) {
    auto model = Model();
    const absl::Status status = CheckReplicasInSync(*model, group);
    EXPECT_TRUE(status.ok()) << "rank " << rank << ": " << status;
    EXPECT_TRUE(MaybeCheckReplicasInSync(*model, group, 3, 0).ok());
  });
}

TEST(DesyncCheckTest, PerturbedParameterOnRank2IsNamed) {
  const std::string name = Model()->NamedParameters()[2].first;
  RunRanks(3, [&](int rank, ProcessGroup& group) {
    auto model = Model();
    if (rank == 2) Perturb(*model, name);
    const absl::Status status = MaybeCheckReplicasInSync(*model, group, 10, 5);
    EXPECT_TRUE(absl::IsFailedPrecondition(status)) << "rank " << rank << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("parameter \"" + name + "\""));
    EXPECT_THAT(std::string(status.message()), HasSubstr("on rank 2"));
  });
}

TEST(DesyncCheckTest, PerturbedBuffersOnTwoRanksAreNamed) {
  std::string name;
  for (const auto& [n, t] : Model()->NamedBuffers()) {
    if (name.empty()) name = n;
  }
  ASSERT_FALSE(name.empty());
  RunRanks(3, [&](int rank, ProcessGroup& group) {
    auto model = Model();
    if (rank != 0) Perturb(*model, name);
    const absl::Status status = CheckReplicasInSync(*model, group);
    EXPECT_TRUE(absl::IsFailedPrecondition(status)) << "rank " << rank << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("buffer \"" + name + "\""));
    EXPECT_THAT(std::string(status.message()), HasSubstr("ranks 1, 2"));
  });
}

// DDP's broadcast_buffers: running statistics differ between forwards (each rank updates them from its
// own batch after the broadcast), so they are not compared; a parameter still is.
TEST(DesyncCheckTest, RebroadcastBuffersAreNotCompared) {
  std::string buffer;
  for (const auto& [n, t] : Model()->NamedBuffers()) {
    if (buffer.empty()) buffer = n;
  }
  const std::string parameter = Model()->NamedParameters()[0].first;
  DesyncCheckOptions rebroadcast;
  rebroadcast.compare_buffers = false;
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    auto model = Model();
    if (rank == 1) Perturb(*model, buffer);
    EXPECT_TRUE(CheckReplicasInSync(*model, group, rebroadcast).ok()) << "rank " << rank;
    EXPECT_TRUE(absl::IsFailedPrecondition(CheckReplicasInSync(*model, group))) << "rank " << rank;
    if (rank == 1) Perturb(*model, parameter);
    const absl::Status status = MaybeCheckReplicasInSync(*model, group, 4, 2, rebroadcast);
    EXPECT_THAT(std::string(status.message()), HasSubstr("parameter \"" + parameter + "\" (state tensor 0)"));
  });
}

}  // namespace
}  // namespace ddp
