// Every collective of the gloo backend against a sequential reference, ranks as threads over one
// in-memory store, for world sizes 1 to 4 and several sizes.
#include "comm/process_group_gloo.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "comm/memory_store.h"
#include "testing/run_ranks.h"
#include "comm/prefix_store.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);

// Runs fn(rank, group) on `world` threads, each with its own gloo group over a shared store.

// Rank r's input: element i = (r + 1) * (i % 7 + 1) - 3 (exact in float32).
std::vector<float> Input(int rank, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((rank + 1) * (i % 7 + 1) - 3);
  return v;
}

std::vector<float> Reference(int world, int64_t n, ReduceOp op) {
  std::vector<float> out = Input(0, n);
  for (int r = 1; r < world; ++r) {
    std::vector<float> in = Input(r, n);
    for (int64_t i = 0; i < n; ++i) {
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          out[i] += in[i];
          break;
        case ReduceOp::kProduct:
          out[i] *= in[i];
          break;
        case ReduceOp::kMin:
          out[i] = std::min(out[i], in[i]);
          break;
        case ReduceOp::kMax:
          out[i] = std::max(out[i], in[i]);
          break;
      }
    }
  }
  if (op == ReduceOp::kAvg)
    for (float& x : out) x /= world;
  return out;
}

class GlooCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectivesTest, AllReduceEveryOpAndSize) {
  const int world = GetParam();
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1001}, int64_t{1} << 18}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      RunRanks(world, [&](int rank, ProcessGroup& group) {
        Tensor t = FromVector(Input(rank, n), {n});
        ASSERT_TRUE(group.AllReduce(t, op)->Wait(kWait).ok());
        EXPECT_EQ(t.ToVector<float>(), Reference(world, n, op)) << "op " << ReduceOpName(op) << " n " << n;
      });
    }
  }
}

TEST_P(GlooCollectivesTest, BroadcastAllGatherReduceScatterReduceBarrier) {
  const int world = GetParam();
  const int64_t n = 333;
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    const int root = world - 1;
    Tensor b = FromVector(Input(rank, n), {n});
    ASSERT_TRUE(group.Broadcast(b, root)->Wait(kWait).ok());
    EXPECT_EQ(b.ToVector<float>(), Input(root, n));

    std::vector<Tensor> gathered;
    for (int r = 0; r < world; ++r) gathered.push_back(Zeros({n}));
    ASSERT_TRUE(group.AllGather(gathered, FromVector(Input(rank, n), {n}))->Wait(kWait).ok());
    for (int r = 0; r < world; ++r) EXPECT_EQ(gathered[r].ToVector<float>(), Input(r, n));

    // ReduceScatter: rank r receives the sum over ranks of their r-th input chunk; chunk c of rank q is
    // Input(q + c, n).
    std::vector<Tensor> chunks;
    for (int c = 0; c < world; ++c) chunks.push_back(FromVector(Input(rank + c, n), {n}));
    Tensor mine = Zeros({n});
    ASSERT_TRUE(group.ReduceScatter(mine, chunks)->Wait(kWait).ok());
    std::vector<float> expected(n, 0.0f);
    for (int q = 0; q < world; ++q) {
      std::vector<float> in = Input(q + rank, n);
      for (int64_t i = 0; i < n; ++i) expected[i] += in[i];
    }
    EXPECT_EQ(mine.ToVector<float>(), expected);

    Tensor reduced = FromVector(Input(rank, n), {n});
    ASSERT_TRUE(group.Reduce(reduced, 0, ReduceOp::kMax)->Wait(kWait).ok());
    if (rank == 0) {
      EXPECT_EQ(reduced.ToVector<float>(), Reference(world, n, ReduceOp::kMax));
    }
    EXPECT_TRUE(group.Barrier()->Wait(kWait).ok());
  });
}

TEST_P(GlooCollectivesTest, OtherDTypes) {
  const int world = GetParam();
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    Tensor ints = FromVector(std::vector<int64_t>{rank, -rank, int64_t{1} << 40}, {3});
    ASSERT_TRUE(group.AllReduce(ints)->Wait(kWait).ok());
    const int64_t s = world * (world - 1) / 2;
    EXPECT_EQ(ints.ToVector<int64_t>(), (std::vector<int64_t>{s, -s, world * (int64_t{1} << 40)}));
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      Tensor x = ToDType(FromVector(std::vector<float>{0.5f * (rank + 1), -2.0f}, {2}), dtype);
      ASSERT_TRUE(group.AllReduce(x, ReduceOp::kAvg)->Wait(kWait).ok());
      std::vector<float> back = ToDType(x, DType::kFloat32).ToVector<float>();
      EXPECT_FLOAT_EQ(back[0], 0.5f * (world + 1) / 2.0f);
      EXPECT_FLOAT_EQ(back[1], -2.0f);
    }
  });
}

TEST_P(GlooCollectivesTest, ObjectsAndIssueOrder) {
  const int world = GetParam();
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    std::string message = rank == 0 ? std::string("hello\0world", 11) : "";
    ASSERT_TRUE(group.BroadcastObject(&message, 0).ok());
    EXPECT_EQ(message, std::string("hello\0world", 11));
    std::vector<std::string> all;
    ASSERT_TRUE(group.AllGatherObject(std::string(rank * 3 + 1, 'a' + rank), &all).ok());
    ASSERT_EQ(all.size(), static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) EXPECT_EQ(all[r], std::string(r * 3 + 1, 'a' + r));
    // Many works in flight complete in issue order with the right values.
    std::vector<Tensor> tensors;
    std::vector<std::shared_ptr<Work>> works;
    for (int i = 0; i < 20; ++i) {
      tensors.push_back(Full({17}, static_cast<float>(i + rank)));
      works.push_back(group.AllReduce(tensors.back()));
    }
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(works[i]->Wait(kWait).ok());
      for (int j = 0; j < i; ++j) EXPECT_TRUE(works[j]->IsCompleted());
      EXPECT_EQ(tensors[i].ToVector<float>()[5], static_cast<float>(world * i + world * (world - 1) / 2));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooCollectivesTest, ::testing::Values(1, 2, 3, 4));

TEST(GlooLargeTest, AllReduce64MiB) {
  const int64_t n = (int64_t{64} << 20) / 4;
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    Tensor t = Full({n}, static_cast<float>(rank + 1));
    ASSERT_TRUE(group.AllReduce(t)->Wait(kWait).ok());
    std::vector<float> v = t.ToVector<float>();
    EXPECT_EQ(v.front(), 3.0f);
    EXPECT_EQ(v.back(), 3.0f);
  });
}

TEST(GlooFailureTest, MissingPeerTimesOutNamingTheRank) {
  MemoryStore store;
  ProcessGroupGlooOptions options;
  options.timeout = absl::Seconds(1);
  auto group = ProcessGroupGloo::Create(store, 1, 2, options);  // rank 0 never comes
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("rank 1 of 2"), std::string::npos) << group.status();
}

TEST(GlooFailureTest, PeerThatLeavesFailsThePendingCollective) {
  MemoryStore store;
  ProcessGroupGlooOptions options;
  options.timeout = absl::Seconds(3);
  options.failure_report_window = absl::Milliseconds(500);
  std::unique_ptr<ProcessGroupGloo> survivor;
  std::thread leaver([&] {
    auto group = ProcessGroupGloo::Create(store, 1, 2, options);
    ASSERT_TRUE(group.ok());
    // Leaves without taking part in the all-reduce: its connections close.
  });
  auto group = ProcessGroupGloo::Create(store, 0, 2, options);
  ASSERT_TRUE(group.ok()) << group.status();
  leaver.join();
  Tensor t = Ones({1000});
  const absl::Time start = absl::Now();
  absl::Status status = (*group)->AllReduce(t)->Wait(absl::Seconds(30));
  EXPECT_FALSE(status.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_NE(status.message().find("AllReduce(sum) #0"), std::string::npos) << status;
  EXPECT_NE(status.message().find("rank 0/2"), std::string::npos) << status;
  // The failure reports name the rank that went away (it never reported a failure).
  EXPECT_NE(status.message().find("[failure reports: lost rank 1"), std::string::npos) << status;
}

}  // namespace
}  // namespace ddp
