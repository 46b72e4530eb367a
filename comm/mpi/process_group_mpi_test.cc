// ProcessGroupMpi in one process, without mpirun (OpenMPI's singleton: MPI_COMM_WORLD of size 1): every
// collective leaves or copies the data as a group of one must, Works complete in issue order, two groups
// coexist, and InitProcessGroup's "mpi" backend takes rank and size from MPI. The multi-rank checks run
// under a real mpirun in tests/mpi_collectives_test.sh.
#include "comm/mpi/process_group_mpi.h"

#include <string>
#include <vector>

#include "comm/init.h"
#include "gtest/gtest.h"
#include "tensor/factory.h"
#include "tensor/tensor.h"

namespace ddp {
namespace {

std::unique_ptr<ProcessGroupMpi> MakeGroup() {
  auto group = ProcessGroupMpi::Create();
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? *std::move(group) : nullptr;
}

TEST(ProcessGroupMpiTest, SingletonRankAndSize) {
  std::unique_ptr<ProcessGroupMpi> group = MakeGroup();
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->local_rank(), 0);
  EXPECT_EQ(group->local_size(), 1);
  EXPECT_EQ(group->backend_name(), "mpi");
}

TEST(ProcessGroupMpiTest, CollectivesOfOneRank) {
  std::unique_ptr<ProcessGroupMpi> group = MakeGroup();
  ASSERT_NE(group, nullptr);
  const absl::Duration wait = absl::Seconds(30);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    Tensor t = FromVector(std::vector<float>{1.5f, -2.0f, 3.0f}, {3});
    ASSERT_TRUE(group->AllReduce(t, op)->Wait(wait).ok());
    EXPECT_EQ(t.ToVector<float>(), (std::vector<float>{1.5f, -2.0f, 3.0f})) << ReduceOpName(op);
  }
  Tensor in = FromVector(std::vector<float>{4, 5}, {2});
  std::vector<Tensor> gathered = {Zeros({2})};
  ASSERT_TRUE(group->AllGather(gathered, in)->Wait(wait).ok());
  EXPECT_EQ(gathered[0].ToVector<float>(), (std::vector<float>{4, 5}));
  Tensor scattered = Zeros({2});
  ASSERT_TRUE(group->ReduceScatter(scattered, {in}, ReduceOp::kSum)->Wait(wait).ok());
  EXPECT_EQ(scattered.ToVector<float>(), (std::vector<float>{4, 5}));
  ASSERT_TRUE(group->Broadcast(in, 0)->Wait(wait).ok());
  ASSERT_TRUE(group->Reduce(in, 0, ReduceOp::kMax)->Wait(wait).ok());
  EXPECT_EQ(in.ToVector<float>(), (std::vector<float>{4, 5}));
  ASSERT_TRUE(group->Barrier()->Wait(wait).ok());
  std::string data = "payload";
  ASSERT_TRUE(group->BroadcastObject(&data, 0).ok());
  EXPECT_EQ(data, "payload");
  std::vector<std::string> all;
  ASSERT_TRUE(group->AllGatherObject("mine", &all).ok());
  EXPECT_EQ(all, (std::vector<std::string>{"mine"}));
}

// Works complete in issue order, and each one's description names the collective, rank and backend.
TEST(ProcessGroupMpiTest, WorksCompleteInIssueOrder) {
  std::unique_ptr<ProcessGroupMpi> group = MakeGroup();
  ASSERT_NE(group, nullptr);
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < 50; ++i) works.push_back(group->AllReduce(Ones({1000})));
  ASSERT_TRUE(works.back()->Wait(absl::Seconds(30)).ok());
  for (const auto& work : works) EXPECT_TRUE(work->IsCompleted());
  auto* async = dynamic_cast<AsyncWork*>(works[3].get());
  ASSERT_NE(async, nullptr);
  EXPECT_EQ(async->description(), "AllReduce(sum) #3 of 1000 float32 on rank 0/1 (mpi)");
}

TEST(ProcessGroupMpiTest, TwoGroupsCoexist) {
  std::unique_ptr<ProcessGroupMpi> a = MakeGroup();
  std::unique_ptr<ProcessGroupMpi> b = MakeGroup();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  Tensor x = Ones({4096});
  Tensor y = Ones({4096});
  auto wa = a->AllReduce(x);
  auto wb = b->AllReduce(y);
  EXPECT_TRUE(wa->Wait(absl::Seconds(30)).ok());
  EXPECT_TRUE(wb->Wait(absl::Seconds(30)).ok());
}

TEST(ProcessGroupMpiTest, InitProcessGroupTakesRankAndSizeFromMpi) {
  InitOptions options;
  options.backend = "mpi";
  options.env = [](const std::string&) { return std::optional<std::string>(); };
  auto context = InitProcessGroup(options);
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ((*context)->group->backend_name(), "mpi");
  EXPECT_EQ((*context)->launch.rank, 0);
  EXPECT_EQ((*context)->launch.world_size, 1);
  EXPECT_EQ((*context)->launch.source, "mpi");
  EXPECT_EQ((*context)->store, nullptr);

  options.rank = 1;
  options.world_size = 2;
  absl::Status contradiction = InitProcessGroup(options).status();
  EXPECT_TRUE(absl::IsInvalidArgument(contradiction)) << contradiction;
  EXPECT_NE(contradiction.message().find("MPI says rank 0 of 1"), std::string::npos) << contradiction;
}

}  // namespace
}  // namespace ddp
