// Every collective of the gloo backend against a sequential reference, ranks as threads over one
// in-memory store, for world sizes 1 to 4 and several sizes.
#include "comm/gloo/process_group_gloo.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <functional>
#include <regex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "store/memory_store.h"
#include "testing/run_ranks.h"
#include "testing/wait_until.h"
#include "store/prefix_store.h"
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
  auto group = ProcessGroupGloo::Create(store, 1, 3, options);  // ranks 0 and 2 never come
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(group.status().message().find("gloo: rank 1 of 3 could not connect to its peers: ranks 0, 2 never joined"),
            std::string::npos)
      << group.status();
}

// Ranks as threads, each creating its group with its own world size; returns each rank's Create status.
std::vector<absl::Status> CreateWithWorldSizes(const std::vector<int>& sizes, absl::Duration timeout) {
  MemoryStore store;
  ProcessGroupGlooOptions options;
  options.timeout = timeout;
  std::vector<absl::Status> statuses(sizes.size());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < static_cast<int>(sizes.size()); ++rank) {
    threads.emplace_back([&, rank] {
      if (rank > 0) {  // rank 0 arrives first: its rendezvous keys are in the store
        ASSERT_TRUE(WaitUntil([&] { return store.NumKeys().value_or(0) > 0; }));
      }
      statuses[rank] = ProcessGroupGloo::Create(store, rank, sizes[rank], options).status();
    });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

// WORLD_SIZE 2 on rank 0 and 3 on rank 1 must not fail deep in Gloo ("enforce fail at address.cc:45 ...
// 136 vs 272"): the rank that disagrees fails at once naming both values, and the rank left waiting says
// why its peer never joined.
TEST(GlooFailureTest, DifferentWorldSizesAreNamed) {
  const absl::Time start = absl::Now();
  std::vector<absl::Status> statuses = CreateWithWorldSizes({2, 3}, absl::Seconds(2));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kFailedPrecondition) << statuses[1];
  EXPECT_NE(statuses[1].message().find("rank 1 was started with WORLD_SIZE=3 but rank 0 with WORLD_SIZE=2"),
            std::string::npos)
      << statuses[1];
  EXPECT_NE(statuses[0].message().find("rank 1 never joined (rank 1 was started with WORLD_SIZE=3)"),
            std::string::npos)
      << statuses[0];
}

// The flight recorder's defaults, dumping into the test's scratch folder.
FlightRecorderOptions RecorderInTestDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return FlightRecorderOptions{2000, absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/flight_recorder")};
}

// Runs `call` on two ranks (threads) whose calls disagree and returns each rank's status; the group is
// then broken, so a later collective must fail too instead of hanging.
std::vector<absl::Status> CallOnTwoRanks(absl::Duration timeout,
                                         const std::function<std::shared_ptr<Work>(int, ProcessGroup&)>& call) {
  MemoryStore store;
  ProcessGroupGlooOptions options;
  options.timeout = timeout;
  options.failure_report_window = absl::Milliseconds(500);
  options.flight_recorder = RecorderInTestDir();
  std::vector<absl::Status> statuses(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto group = ProcessGroupGloo::Create(store, rank, 2, options);
      ASSERT_TRUE(group.ok()) << group.status();
      statuses[rank] = call(rank, **group)->Wait(absl::Seconds(20));
      EXPECT_FALSE((*group)->Barrier()->Wait(absl::Seconds(20)).ok());
    });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

// Rank 0 all-reduces 1000 floats while rank 1 all-reduces 3 (as DDP with different bucket caps would).
// Gloo must not throw gloo::EnforceNotMet ("op.preamble.length <= op.nbytes") on its event-loop thread
// (std::terminate): both ranks fail within the timeout with a Status naming the collective and what
// each rank called (Note [Collective tags]).
TEST(GlooFailureTest, RanksCallingDifferentCollectivesFailNamingThem) {
  const absl::Time start = absl::Now();
  std::vector<absl::Status> statuses = CallOnTwoRanks(absl::Seconds(2), [](int rank, ProcessGroup& group) {
    return group.AllReduce(Ones({rank == 0 ? 1000 : 3}));
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(12));
  for (int rank = 0; rank < 2; ++rank) {
    const std::string message(statuses[rank].message());
    EXPECT_EQ(statuses[rank].code(), absl::StatusCode::kFailedPrecondition) << statuses[rank];
    EXPECT_NE(message.find(absl::StrCat("AllReduce(sum) #0 of ", rank == 0 ? 1000 : 3, " float32 on rank ", rank,
                                        "/2 (gloo) failed")),
              std::string::npos)
        << message;
  }
  EXPECT_NE(statuses[0].message().find("ranks called different collectives at call #0: this rank (0) AllReduce(sum) "
                                       "of 1000 float32, rank 1 AllReduce(sum) of 3 float32"),
            std::string::npos)
      << statuses[0];
}

// Different reduce ops (or dtypes of one size) must not be reduced against each other silently; they
// fail like a size mismatch.
TEST(GlooFailureTest, DifferentReduceOpsAreNotReducedTogether) {
  std::vector<absl::Status> statuses = CallOnTwoRanks(absl::Seconds(1), [](int rank, ProcessGroup& group) {
    return group.AllReduce(Ones({8}), rank == 0 ? ReduceOp::kSum : ReduceOp::kMax);
  });
  EXPECT_NE(statuses[1].message().find("this rank (1) AllReduce(max) of 8 float32, rank 0 AllReduce(sum) of 8 float32"),
            std::string::npos)
      << statuses[1];
}

TEST(GlooFailureTest, PeerThatLeavesFailsThePendingCollective) {
  MemoryStore store;
  ProcessGroupGlooOptions options;
  options.timeout = absl::Seconds(3);
  options.failure_report_window = absl::Milliseconds(500);
  options.flight_recorder = RecorderInTestDir();
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

// Ranks 0 and 1 wait in call #1 while rank 2, alive and connected, never issues it (stopped, or busy
// elsewhere). Gloo's own timeout fails their call; each error names rank 2 and the call it never
// completed (Note [Hang postmortem]), and each rank dumped its calls.
TEST(GlooFailureTest, ARankThatStopsIssuingIsNamedWithTheCallItNeverCompleted) {
  using ::testing::HasSubstr;
  MemoryStore store;
  ProcessGroupGlooOptions options;
  options.timeout = absl::Seconds(1);
  options.failure_report_window = absl::Seconds(3);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dumps = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/gloo_stopped_rank");
  options.flight_recorder = FlightRecorderOptions{100, dumps};
  std::vector<absl::Status> statuses(2);
  absl::Notification waiters_done;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      auto group = ProcessGroupGloo::Create(store, rank, 3, options);
      ASSERT_TRUE(group.ok()) << group.status();
      Tensor t = Ones({10});
      ASSERT_TRUE((*group)->AllReduce(t)->Wait(absl::Seconds(20)).ok());
      if (rank == 2) {
        waiters_done.WaitForNotificationWithTimeout(absl::Seconds(60));
        return;
      }
      statuses[rank] = (*group)->AllReduce(t)->Wait((*group)->timeout());
    });
  }
  threads[0].join();
  threads[1].join();
  waiters_done.Notify();
  threads[2].join();
  for (int rank = 0; rank < 2; ++rank) {
    const std::string message(statuses[rank].message());
    EXPECT_THAT(message, HasSubstr(absl::StrCat("AllReduce(sum) #1 of 10 float32 on rank ", rank, "/3 (gloo)")));
    EXPECT_THAT(message, HasSubstr("[failure reports: lost rank 2 (no report within 3s"));
    EXPECT_THAT(message, HasSubstr("[flight recorder: rank 2 is behind: no progress report within 3s from rank 2 "
                                   "(stopped, hung, or busy outside collectives); it has not completed AllReduce(sum) "
                                   "#1 of 10 float32, which ranks 0, 1 are in ("));
    EXPECT_THAT(message, HasSubstr("after completing every call through #0)"));
    std::smatch path;
    ASSERT_TRUE(std::regex_search(message, path, std::regex("; dump ([^;]+);"))) << message;
    EXPECT_THAT(path[1].str(), ::testing::StartsWith(dumps + "/"));
    EXPECT_THAT(path[1].str(), ::testing::EndsWith(absl::StrCat("/rank", rank, ".jsonl")));
    struct stat st;
    EXPECT_EQ(::stat(path[1].str().c_str(), &st), 0) << path[1];
  }
}

}  // namespace
}  // namespace ddp
