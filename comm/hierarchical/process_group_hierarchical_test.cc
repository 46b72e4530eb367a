// ProcessGroupHierarchical with ranks as threads over one MemoryStore, "hosts" given by host identities:
// the layout rules, and every all-reduce op against a sequential reference on 2 hosts x 2 ranks (hosts
// contiguous and interleaved in rank order), sizes that do and do not divide by the ranks per host. The
// two-namespace job (real hosts, ddprun, --backend=auto) is tests/multihost_test.sh.
#include "comm/hierarchical/process_group_hierarchical.h"

#include <algorithm>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "store/memory_store.h"
#include "comm/gloo/process_group_gloo.h"
#include "comm/shm/process_group_shm.h"
#include "gtest/gtest.h"
#include "tensor/tensor.h"

namespace ddp {
namespace {

TEST(ComputeHostLayoutTest, ContiguousHosts) {
  auto layout = ComputeHostLayout({"a", "a", "b", "b"}, 3);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->host_count, 2);
  EXPECT_EQ(layout->host_index, 1);
  EXPECT_EQ(layout->local_size, 2);
  EXPECT_EQ(layout->local_rank, 1);
  EXPECT_EQ(layout->local_ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(layout->cross_ranks, (std::vector<int>{1, 3}));
}

TEST(ComputeHostLayoutTest, InterleavedHostsAreNumberedByLowestRank) {
  auto layout = ComputeHostLayout({"b", "a", "b", "a", "c", "c"}, 3);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->host_count, 3);
  EXPECT_EQ(layout->host_index, 1);  // "b" (rank 0) is host 0, "a" (rank 1) host 1, "c" host 2
  EXPECT_EQ(layout->local_ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(layout->local_rank, 1);
  EXPECT_EQ(layout->cross_ranks, (std::vector<int>{2, 3, 5}));
}

TEST(ComputeHostLayoutTest, UnequalHostsAreRefusedNamingThem) {
  auto layout = ComputeHostLayout({"a", "a", "a", "b"}, 0);
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(layout.status().message(), "ranks 0,1,2) has 3 but host 1 (\"b\", ranks 3) has 1"))
      << layout.status();
}

// Calls fn(rank, group) on one thread per identity, each with its hierarchical group over one MemoryStore.
void RunHierarchicalRanks(const std::vector<std::string>& identities,
                          const std::function<void(int rank, ProcessGroup& group)>& fn) {
  MemoryStore store;
  const int world = static_cast<int>(identities.size());
  const absl::Duration timeout = absl::Seconds(60);
  InnerGroupFactory shm = [&](Store& s, int rank, int size) -> absl::StatusOr<std::unique_ptr<ProcessGroup>> {
    ProcessGroupShmOptions options;
    options.timeout = timeout;
    options.channel.slot_bytes = 64 << 10;  // small slots: large all-reduces run in chunks
    DDP_ASSIGN_OR_RETURN(auto group, ProcessGroupShm::Create(s, rank, size, options));
    return std::unique_ptr<ProcessGroup>(std::move(group));
  };
  InnerGroupFactory gloo = [&](Store& s, int rank, int size) -> absl::StatusOr<std::unique_ptr<ProcessGroup>> {
    ProcessGroupGlooOptions options;
    options.timeout = timeout;
    DDP_ASSIGN_OR_RETURN(auto group, ProcessGroupGloo::Create(s, rank, size, options));
    return std::unique_ptr<ProcessGroup>(std::move(group));
  };
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      auto group = ProcessGroupHierarchical::Create(store, rank, world, identities, timeout, shm, gloo);
      ASSERT_TRUE(group.ok()) << group.status();
      fn(rank, **group);
      EXPECT_TRUE((*group)->Barrier()->Wait(timeout).ok()) << "final barrier of rank " << rank;
    });
  }
  for (auto& t : threads) t.join();
}

// Rank r's element i: small integers, so every reduction order gives exact results.
double Value(int rank, int64_t i) { return (rank + 1) * (i % 3 + 1) - 2; }

double Reduced(int world, int64_t i, ReduceOp op) {
  double acc = Value(0, i);
  for (int r = 1; r < world; ++r) {
    const double x = Value(r, i);
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += x;
    if (op == ReduceOp::kProduct) acc *= x;
    if (op == ReduceOp::kMin) acc = std::min(acc, x);
    if (op == ReduceOp::kMax) acc = std::max(acc, x);
  }
  return op == ReduceOp::kAvg ? acc / world : acc;
}

void CheckEveryAllReduce(const std::vector<std::string>& identities) {
  const int world = static_cast<int>(identities.size());
  RunHierarchicalRanks(identities, [&](int rank, ProcessGroup& group) {
    EXPECT_EQ(group.backend_name(), "hier(shm+gloo)");
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{50001}}) {
        Tensor t = Tensor::Empty({n});
        for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(Value(rank, i));
        ASSERT_TRUE(group.AllReduce(t, op)->Wait(absl::Seconds(60)).ok());
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_FLOAT_EQ(t.data<float>()[i], static_cast<float>(Reduced(world, i, op)))
              << ReduceOpName(op) << " n=" << n << " i=" << i << " rank " << rank;
        }
      }
    }
    Tensor ints = Tensor::Empty({5}, DType::kInt64);
    for (int64_t i = 0; i < 5; ++i) ints.data<int64_t>()[i] = static_cast<int64_t>(Value(rank, i));
    ASSERT_TRUE(group.AllReduce(ints, ReduceOp::kSum)->Wait(absl::Seconds(60)).ok());
    for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(ints.data<int64_t>()[i], static_cast<int64_t>(Reduced(world, i, ReduceOp::kSum)));
    Tensor b = Tensor::Empty({3});
    for (int i = 0; i < 3; ++i) b.data<float>()[i] = static_cast<float>(rank * 10 + i);
    ASSERT_TRUE(group.Broadcast(b, 2)->Wait(absl::Seconds(60)).ok());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(b.data<float>()[i], 20 + i);
  });
}

TEST(ProcessGroupHierarchicalTest, AllReduceMatchesReferenceOnContiguousHosts) {
  CheckEveryAllReduce({"host-a", "host-a", "host-b", "host-b"});
}

TEST(ProcessGroupHierarchicalTest, AllReduceMatchesReferenceOnInterleavedHosts) {
  CheckEveryAllReduce({"host-a", "host-b", "host-a", "host-b"});
}

}  // namespace
}  // namespace ddp
