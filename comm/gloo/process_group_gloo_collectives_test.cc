// Gather, Scatter, AllToAll, Send/Recv, MonitoredBarrier, the ring ReduceScatter and NewGroup of the
// gloo backend against sequential references, ranks as threads over one in-memory store, worlds 1 to 4.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "store/memory_store.h"
#include "comm/gloo/gloo_subgroup.h"
#include "comm/process_group_debug.h"
#include "comm/gloo/process_group_gloo.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/run_ranks.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(60);

// Rank r's values under `salt`: small integers, exact in float32 and int64 for every reduction of up to
// four ranks in any order.
template <typename T>
std::vector<T> Values(int rank, int64_t n, int salt) {
  std::vector<T> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>((rank + 1 + salt) * (i % 7 + 1) - 3);
  return v;
}

template <typename T>
Tensor Make(int rank, int64_t n, int salt) {
  return FromVector(Values<T>(rank, n, salt), {n});
}

template <typename T>
T Apply(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return a + b;
    case ReduceOp::kProduct:
      return a * b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
  }
  return a;
}

// The sequential reduction over ranks q of Values(q + shift, n, salt); kAvg divides as the backend does
// (int64 floor division, comm/reduce_functions.h).
template <typename T>
std::vector<T> Reduced(int world, int64_t n, int salt, ReduceOp op, int shift) {
  std::vector<T> out = Values<T>(shift, n, salt);
  for (int q = 1; q < world; ++q) {
    const std::vector<T> in = Values<T>(q + shift, n, salt);
    for (int64_t i = 0; i < n; ++i) out[i] = Apply(op, out[i], in[i]);
  }
  if (op == ReduceOp::kAvg) {
    for (T& x : out) {
      if constexpr (std::is_integral_v<T>) {
        x = static_cast<T>(x >= 0 ? x / world : -((-x + world - 1) / world));
      } else {
        x /= static_cast<T>(world);
      }
    }
  }
  return out;
}

std::vector<Tensor> ZerosList(int count, int64_t n, DType dtype) {
  std::vector<Tensor> out;
  for (int i = 0; i < count; ++i) out.push_back(Zeros({n}, dtype));
  return out;
}

class GlooMoreCollectivesTest : public ::testing::TestWithParam<int> {};

template <typename T>
void CheckRingReduceScatter(int world, DType dtype) {
  // 600001 elements: several segments of the ring (Note [Ring reduce-scatter]), the last one short.
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1001}, int64_t{600001}}) {
    RunRanks(world, [&](int rank, ProcessGroup& group) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
        // Rank q's chunk c is Values(q + c): rank r receives the reduction over q of Values(q + r).
        std::vector<Tensor> inputs;
        for (int c = 0; c < world; ++c) inputs.push_back(Make<T>(rank + c, n, 1));
        Tensor output = Zeros({n}, dtype);
        ASSERT_TRUE(group.ReduceScatter(output, inputs, op)->Wait(kWait).ok());
        EXPECT_EQ(output.ToVector<T>(), (Reduced<T>(world, n, 1, op, rank)))
            << ReduceOpName(op) << " n=" << n << " rank " << rank;
        // The inputs are left as they were.
        EXPECT_EQ(inputs[0].ToVector<T>(), Values<T>(rank, n, 1));
      }
    });
  }
}

TEST_P(GlooMoreCollectivesTest, RingReduceScatterMatchesTheReferenceForEveryOp) {
  CheckRingReduceScatter<float>(GetParam(), DType::kFloat32);
  CheckRingReduceScatter<int64_t>(GetParam(), DType::kInt64);
}

TEST_P(GlooMoreCollectivesTest, GatherAndScatterFromEveryRootAndSize) {
  const int world = GetParam();
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1001}}) {
      for (int root : {0, world - 1}) {
        std::vector<Tensor> gathered = rank == root ? ZerosList(world, n, DType::kFloat32) : std::vector<Tensor>{};
        ASSERT_TRUE(group.Gather(gathered, Make<float>(rank, n, 2), root)->Wait(kWait).ok());
        if (rank == root) {
          for (int r = 0; r < world; ++r) EXPECT_EQ(gathered[r].ToVector<float>(), (Values<float>(r, n, 2)));
        }
        std::vector<Tensor> pieces;
        if (rank == root) {
          for (int r = 0; r < world; ++r) pieces.push_back(Make<int64_t>(r * 10, n, 3));
        }
        Tensor piece = Zeros({n}, DType::kInt64);
        ASSERT_TRUE(group.Scatter(piece, pieces, root)->Wait(kWait).ok());
        EXPECT_EQ(piece.ToVector<int64_t>(), (Values<int64_t>(rank * 10, n, 3))) << "root " << root;
      }
    }
  });
}

TEST_P(GlooMoreCollectivesTest, AllToAllSendsChunkRToRankR) {
  const int world = GetParam();
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1001}}) {
      // Rank q's chunk for rank r is Values(10 q + r).
      std::vector<Tensor> inputs;
      for (int r = 0; r < world; ++r) inputs.push_back(Make<float>(10 * rank + r, n, 0));
      std::vector<Tensor> outputs = ZerosList(world, n, DType::kFloat32);
      ASSERT_TRUE(group.AllToAll(outputs, inputs)->Wait(kWait).ok());
      for (int q = 0; q < world; ++q) {
        EXPECT_EQ(outputs[q].ToVector<float>(), (Values<float>(10 * q + rank, n, 0))) << "from rank " << q;
      }
    }
  });
}

TEST_P(GlooMoreCollectivesTest, SendRecvAroundTheRingWithTagsOutOfOrder) {
  const int world = GetParam();
  if (world == 1) GTEST_SKIP() << "point to point needs two ranks";
  RunRanks(world, [&](int rank, ProcessGroup& group) {
    const int right = (rank + 1) % world, left = (rank + world - 1) % world;
    // Every rank sends before it receives (a deadlock if a send waited for its receive on the worker),
    // tag 7 then tag 3; the receives are posted in the other order.
    Tensor first = Make<float>(rank, 1001, 7), second = Make<int64_t>(rank, 5, 3);
    Tensor got_first = Zeros({1001}), got_second = Zeros({5}, DType::kInt64);
    auto send_first = group.Send(first, right, 7);
    auto send_second = group.Send(second, right, 3);
    auto recv_second = group.Recv(got_second, left, 3);
    auto recv_first = group.Recv(got_first, left, 7);
    for (auto* work : {&send_first, &send_second, &recv_second, &recv_first}) ASSERT_TRUE((*work)->Wait(kWait).ok());
    EXPECT_EQ(got_first.ToVector<float>(), (Values<float>(left, 1001, 7)));
    EXPECT_EQ(got_second.ToVector<int64_t>(), (Values<int64_t>(left, 5, 3)));
    // Collectives still agree afterwards (point to point takes no sequence number).
    Tensor sum = Make<float>(rank, 3, 0);
    ASSERT_TRUE(group.AllReduce(sum)->Wait(kWait).ok());
    EXPECT_EQ(sum.ToVector<float>(), (Reduced<float>(world, 3, 0, ReduceOp::kSum, 0)));
  });
}

TEST_P(GlooMoreCollectivesTest, MonitoredBarrierPassesWhenEveryRankArrives) {
  const int world = GetParam();
  RunRanks(world, [&](int, ProcessGroup& group) {
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(group.MonitoredBarrier(absl::Seconds(30), i % 2 == 0).ok());
  });
}

// Ranks 2 and 3 of 4 never arrive: rank 0 names the first (or both with wait_all_ranks) after the
// timeout, and rank 1, which arrived, returns the same error.
void CheckMissingRanks(bool wait_all_ranks, const std::string& expected) {
  RunRanks(4, [&](int rank, ProcessGroup& group) {
    if (rank >= 2) return;
    const absl::Time start = absl::Now();
    const absl::Status status = group.MonitoredBarrier(absl::Milliseconds(300), wait_all_ranks);
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_THAT(status.message(), HasSubstr(expected)) << "rank " << rank;
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("on rank ", rank, "/4")));
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  });
}

TEST(GlooMonitoredBarrierTest, NamesTheFirstMissingRank) {
  CheckMissingRanks(false, "rank 2 has not arrived at MonitoredBarrier #0 within 300ms");
}

TEST(GlooMonitoredBarrierTest, NamesEveryMissingRankWithWaitAllRanks) {
  CheckMissingRanks(true, "ranks 2, 3 have not arrived at MonitoredBarrier #0 within 300ms");
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooMoreCollectivesTest, ::testing::Values(1, 2, 3, 4));

TEST(NewGroupTest, RanksOneAndThreeAllReduceWhileZeroAndTwoExchange) {
  MemoryStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 4; ++rank) {
    threads.emplace_back([&store, rank] {
      auto parent = ProcessGroupGloo::Create(store, rank, 4);
      ASSERT_TRUE(parent.ok()) << parent.status();
      // Listed as {3, 1}: rank 3 is the subgroup's rank 0.
      auto sub = NewGlooSubgroup(store, rank, 4, {3, 1}, /*group_index=*/0, {});
      ASSERT_TRUE(sub.ok()) << sub.status();
      if (rank == 1 || rank == 3) {
        ASSERT_NE(*sub, nullptr);
        EXPECT_EQ((*sub)->size(), 2);
        EXPECT_EQ((*sub)->rank(), rank == 3 ? 0 : 1);
        for (int i = 0; i < 5; ++i) {  // several calls, so the sub- and parent groups' traffic overlaps
          Tensor t = Make<float>(rank, 1001, i);
          ASSERT_TRUE((*sub)->AllReduce(t)->Wait(kWait).ok());
          std::vector<float> expected = Values<float>(1, 1001, i), three = Values<float>(3, 1001, i);
          for (size_t j = 0; j < expected.size(); ++j) expected[j] += three[j];
          EXPECT_EQ(t.ToVector<float>(), expected);
        }
      } else {
        EXPECT_EQ(*sub, nullptr);
        const int peer = 2 - rank;
        for (int i = 0; i < 5; ++i) {
          Tensor out = Make<int64_t>(rank, 17, i), in = Zeros({17}, DType::kInt64);
          auto sent = (*parent)->Send(out, peer, i);
          ASSERT_TRUE((*parent)->Recv(in, peer, i)->Wait(kWait).ok());
          ASSERT_TRUE(sent->Wait(kWait).ok());
          EXPECT_EQ(in.ToVector<int64_t>(), (Values<int64_t>(peer, 17, i)));
        }
      }
      // The parent group still works for everyone.
      Tensor all = Make<float>(rank, 4, 0);
      ASSERT_TRUE((*parent)->AllReduce(all)->Wait(kWait).ok());
      EXPECT_EQ(all.ToVector<float>(), (Reduced<float>(4, 4, 0, ReduceOp::kSum, 0)));
      if (*sub != nullptr) {
        EXPECT_TRUE((*sub)->Barrier()->Wait(kWait).ok());
      }
      EXPECT_TRUE((*parent)->Barrier()->Wait(kWait).ok());
    });
  }
  for (auto& t : threads) t.join();
}

TEST(NewGroupTest, RejectsBadRankLists) {
  EXPECT_THAT(ValidateSubgroupRanks({}, 4).message(), HasSubstr("is empty"));
  EXPECT_THAT(ValidateSubgroupRanks({0, 4}, 4).message(), HasSubstr("rank 4 of the list [0, 4] is outside the group of 4"));
  EXPECT_THAT(ValidateSubgroupRanks({1, 2, 1}, 4).message(), HasSubstr("rank 1 appears twice in the list [1, 2, 1]"));
  EXPECT_TRUE(ValidateSubgroupRanks({3, 0}, 4).ok());
  MemoryStore store;
  EXPECT_EQ(NewGlooSubgroup(store, 0, 2, {0, 0}, 0, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

// DDP_DEBUG=detail forwards these collectives, and compares the collective ones first.
TEST(GlooDebugWrapperTest, ForwardsTheNewCollectivesAndCatchesADifferentRoot) {
  RunRanks(2, [&](int rank, ProcessGroup& inner) {
    ProcessGroupDebug group(&inner);
    std::vector<Tensor> outputs = ZerosList(2, 3, DType::kFloat32);
    ASSERT_TRUE(group.AllToAll(outputs, {Make<float>(rank, 3, 0), Make<float>(rank, 3, 1)})->Wait(kWait).ok());
    EXPECT_EQ(outputs[1].ToVector<float>(), (Values<float>(1, 3, rank)));
    Tensor got = Zeros({3});
    auto sent = group.Send(Make<float>(rank, 3, 5), 1 - rank, 9);
    ASSERT_TRUE(group.Recv(got, 1 - rank, 9)->Wait(kWait).ok());
    ASSERT_TRUE(sent->Wait(kWait).ok());
    EXPECT_EQ(got.ToVector<float>(), (Values<float>(1 - rank, 3, 5)));
    EXPECT_TRUE(group.MonitoredBarrier(absl::Seconds(30)).ok());
    // The ranks disagree on the root: both fail at once, naming both calls.
    std::vector<Tensor> gathered = ZerosList(2, 3, DType::kFloat32);
    const absl::Status status = group.Gather(gathered, Make<float>(rank, 3, 0), rank)->Wait(kWait);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_THAT(status.message(), HasSubstr("rank 0 calls #"));
    EXPECT_THAT(status.message(), HasSubstr("Gather(root 0) of 3 float32, rank 1 calls"));
    EXPECT_THAT(status.message(), HasSubstr("Gather(root 1) of 3 float32"));
  });
}

// A Recv whose Send has another size never meets it (Note [Point-to-point tags]): both fail at the
// timeout, naming the call and the peer, instead of crashing Gloo.
TEST(GlooPointToPointTest, MismatchedSizesFailAtTheTimeoutNamingCallAndPeer) {
  MemoryStore store;
  ProcessGroupGlooOptions options;
  options.timeout = absl::Seconds(1);
  options.failure_report_window = absl::Milliseconds(200);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto group = ProcessGroupGloo::Create(store, rank, 2, options);
      ASSERT_TRUE(group.ok()) << group.status();
      const absl::Time start = absl::Now();
      absl::Status status;
      if (rank == 0) {
        status = (*group)->Send(Zeros({4}), 1, 5)->Wait(kWait);
        EXPECT_THAT(status.message(), HasSubstr("Send(to rank 1, tag 5) of 4 float32 on rank 0/2 (gloo) failed"));
      } else {
        status = (*group)->Recv(Zeros({3}), 0, 5)->Wait(kWait);
        EXPECT_THAT(status.message(), HasSubstr("Recv(from rank 0, tag 5) of 3 float32 on rank 1/2 (gloo) failed"));
      }
      EXPECT_FALSE(status.ok());
      EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    });
  }
  for (auto& t : threads) t.join();
}

// A backend without these collectives: the interface's defaults fail them, naming call and backend.
class OldBackend : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend_name() const override { return "old"; }
  absl::Duration timeout() const override { return absl::Seconds(1); }
  std::shared_ptr<Work> AllReduce(const Tensor&, ReduceOp) override { return nullptr; }
  std::shared_ptr<Work> Broadcast(const Tensor&, int) override { return nullptr; }
  std::shared_ptr<Work> AllGather(const std::vector<Tensor>&, const Tensor&) override { return nullptr; }
  std::shared_ptr<Work> ReduceScatter(const Tensor&, const std::vector<Tensor>&, ReduceOp) override { return nullptr; }
  std::shared_ptr<Work> Reduce(const Tensor&, int, ReduceOp) override { return nullptr; }
  std::shared_ptr<Work> Barrier() override { return nullptr; }
};

TEST(ProcessGroupDefaultsTest, NewCollectivesAreUnimplementedNamingTheBackend) {
  OldBackend group;
  Tensor t = Zeros({3});
  const std::vector<std::pair<std::string, std::shared_ptr<Work>>> works = {
      {"Gather", group.Gather({t, t}, t, 0)},   {"Scatter", group.Scatter(t, {t, t}, 0)},
      {"AllToAll", group.AllToAll({t, t}, {t, t})}, {"Send", group.Send(t, 1)},
      {"Recv", group.Recv(t, 1)}};
  for (const auto& [name, work] : works) {
    ASSERT_TRUE(work->IsCompleted()) << name;
    const absl::Status status = work->Wait(absl::Seconds(1));
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << name;
    EXPECT_THAT(status.message(), HasSubstr(name + " is not implemented by the old backend"));
  }
  const absl::Status barrier = group.MonitoredBarrier(absl::Seconds(1));
  EXPECT_EQ(barrier.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(barrier.message(), HasSubstr("MonitoredBarrier is not implemented by the old backend"));
}

}  // namespace
}  // namespace ddp
