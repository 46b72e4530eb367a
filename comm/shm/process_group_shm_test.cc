// ProcessGroupShm with ranks as threads over one MemoryStore: every collective against a sequential
// reference (float32 and int64, every op, sizes around and beyond a slot), timeouts, and /dev/shm
// left clean. The process tests (a SIGKILLed rank) are in tests/collectives_process_test.cc.
#include "comm/shm/process_group_shm.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "store/memory_store.h"
#include "testing/shm_test_util.h"
#include "testing/wait_until.h"
#include "gtest/gtest.h"
#include "tensor/tensor.h"

namespace ddp {
namespace {

using shm_test::Input;
using shm_test::Reference;
using shm_test::RunShmRanks;
using shm_test::Values;

// Entries of /dev/shm whose name starts with `tag`.
std::vector<std::string> ShmEntries(const std::string& tag) {
  std::vector<std::string> out;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    if (absl::StartsWith(e->d_name, tag)) out.push_back(e->d_name);
  }
  closedir(dir);
  return out;
}

// The CPUs as a quiet machine shows them (never oversubscribed: Note [Spinning under contention] in
// comm/shm/shm_channel.cc), for the tests of how long waits spin, which the load of the machine running
// them must not decide.
CpuContention& QuietCpus() {
  static CpuContention* const quiet = new CpuContention(1, []() -> std::optional<int> { return std::nullopt; });
  return *quiet;
}

struct Config {
  int world;
  size_t slot_bytes;  // small slots make 1001 and 5000 elements run in several chunks and the large path
};

class ShmCollectivesTest : public ::testing::TestWithParam<Config> {
 protected:
  ProcessGroupShmOptions Options() const {
    ProcessGroupShmOptions options;
    options.timeout = absl::Seconds(60);
    options.channel.slot_bytes = GetParam().slot_bytes;
    options.small_allreduce_bytes = std::min<size_t>(options.small_allreduce_bytes, GetParam().slot_bytes / 4);
    return options;
  }

  template <typename T>
  void CheckEveryCollective(DType dtype) {
    const int world = GetParam().world;
    RunShmRanks(world, [&](int rank, ProcessGroup& group) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1001}, int64_t{5000}}) {
        int salt = 0;
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
          Tensor t = Input<T>(rank, n, ++salt % 3, dtype);
          ASSERT_TRUE(group.AllReduce(t, op)->Wait(absl::Seconds(60)).ok());
          EXPECT_EQ(Values<T>(t), Reference<T>(world, n, salt % 3, op)) << ReduceOpName(op) << " n=" << n;
          Tensor r = Input<T>(rank, n, 1, dtype);
          ASSERT_TRUE(group.Reduce(r, world - 1, op)->Wait(absl::Seconds(60)).ok());
          if (rank == world - 1) {
            EXPECT_EQ(Values<T>(r), Reference<T>(world, n, 1, op)) << "Reduce n=" << n;
          }
          Tensor out = Tensor::Empty({n}, dtype);
          std::vector<Tensor> inputs;
          for (int c = 0; c < world; ++c) inputs.push_back(Input<T>(rank + c, n, 0, dtype));
          ASSERT_TRUE(group.ReduceScatter(out, inputs, op)->Wait(absl::Seconds(60)).ok());
          EXPECT_EQ(Values<T>(out), Reference<T>(world, n, 0, op, rank)) << "ReduceScatter n=" << n;
        }
        for (int root : {0, world - 1}) {
          Tensor b = Input<T>(rank, n, 2, dtype);
          ASSERT_TRUE(group.Broadcast(b, root)->Wait(absl::Seconds(60)).ok());
          EXPECT_EQ(Values<T>(b), Values<T>(Input<T>(root, n, 2, dtype))) << "Broadcast n=" << n;
        }
        std::vector<Tensor> outputs;
        for (int q = 0; q < world; ++q) outputs.push_back(Tensor::Empty({n}, dtype));
        ASSERT_TRUE(group.AllGather(outputs, Input<T>(rank, n, 3, dtype))->Wait(absl::Seconds(60)).ok());
        for (int q = 0; q < world; ++q) EXPECT_EQ(Values<T>(outputs[q]), Values<T>(Input<T>(q, n, 3, dtype)));
        ASSERT_TRUE(group.Barrier()->Wait(absl::Seconds(60)).ok());
      }
    }, Options());
  }
};

TEST_P(ShmCollectivesTest, Float32MatchesTheSequentialReference) { CheckEveryCollective<float>(DType::kFloat32); }

TEST_P(ShmCollectivesTest, Int64MatchesTheSequentialReference) { CheckEveryCollective<int64_t>(DType::kInt64); }

INSTANTIATE_TEST_SUITE_P(WorldsAndSlots, ShmCollectivesTest,
                         ::testing::Values(Config{1, 1 << 20}, Config{2, 1 << 20}, Config{3, 1 << 20},
                                           Config{4, 1 << 20}, Config{2, 4096}, Config{3, 4096},
                                           Config{4, 4096}),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return absl::StrCat("world", info.param.world, "_slot", info.param.slot_bytes);
                         });

// The inline areas (inputs of at most ShmChannel::kInlineBytes) are double buffered like the slots, and
// a rank reuses one once the peer posted its next inline input or its kDone: back-to-back bursts of
// small all-reduces, each of its own values, with sizes on both sides of the inline limit and
// broadcasts in between (whose non-roots post no input), must each get their own sum.
TEST(ShmInlineAreasTest, BackToBackSmallAllReducesKeepTheirOwnInputs) {
  constexpr int kBursts = 150;
  constexpr int kPerBurst = 16;
  const int64_t sizes[] = {1, 7, 254, 255, 1000};  // 254 floats fill an inline area; 255 do not fit
  for (int world : {2, 3}) {
    RunShmRanks(world, [&](int rank, ProcessGroup& group) {
      for (int burst = 0; burst < kBursts; ++burst) {
        std::vector<Tensor> tensors;
        std::vector<std::shared_ptr<Work>> works;
        for (int i = 0; i < kPerBurst; ++i) {
          const int64_t n = sizes[(burst + i) % 5];
          tensors.push_back(Input<float>(rank, n, (burst * kPerBurst + i) % 7, DType::kFloat32));
          works.push_back(group.AllReduce(tensors.back()));
          if (i % 5 == 4) {
            tensors.push_back(Input<float>(rank, 3, i, DType::kFloat32));
            works.push_back(group.Broadcast(tensors.back(), burst % world));
          }
        }
        for (auto& work : works) ASSERT_TRUE(work->Wait(absl::Seconds(60)).ok());
        for (int i = 0, t = 0; i < kPerBurst; ++i, ++t) {
          const int64_t n = sizes[(burst + i) % 5];
          ASSERT_EQ(Values<float>(tensors[t]), Reference<float>(world, n, (burst * kPerBurst + i) % 7, ReduceOp::kSum))
              << "world " << world << " rank " << rank << " burst " << burst << " call " << i << " n=" << n;
          if (i % 5 == 4) {
            ++t;
            ASSERT_EQ(Values<float>(tensors[t]), Values<float>(Input<float>(burst % world, 3, i, DType::kFloat32)));
          }
        }
      }
    });
  }
}

// Note [Inline collectives]: issue-order completion and correct results whether a small all-reduce
// runs on the caller's thread, is handed to the worker half-way, or queues behind one running inline.
class ShmInlineTest : public ::testing::Test {
 protected:
  static constexpr int64_t kSmall = 1000;     // 4000 bytes: the inline path
  static constexpr int64_t kLarge = 100000;   // 400 KB: always queued
  // Rank 1 issues AllReduce a (small, salt 0), b (small, salt 1), c (large, salt 2) from one thread once
  // `rank1_may_start` holds (bounded wait). Rank 0 runs `issue(group, a, b, c)`, which must issue the same
  // three in that order and return their Works. Both check results and completion order (a, b, c).
  void Run(const ProcessGroupShmOptions& options, const std::function<bool()>& rank1_may_start,
           const std::function<std::vector<std::shared_ptr<Work>>(ProcessGroupShm&, Tensor, Tensor, Tensor)>& issue) {
    RunShmRanks(2, [&](int rank, ProcessGroupShm& group) {
      Tensor a = Input<float>(rank, kSmall, 0, DType::kFloat32);
      Tensor b = Input<float>(rank, kSmall, 1, DType::kFloat32);
      Tensor c = Input<float>(rank, kLarge, 2, DType::kFloat32);
      std::vector<std::shared_ptr<Work>> works;
      if (rank == 0) {
        works = issue(group, a, b, c);
      } else {
        EXPECT_TRUE(WaitUntil(rank1_may_start)) << "rank 0 never reached the point rank 1 waits for";
        works = {group.AllReduce(a), group.AllReduce(b), group.AllReduce(c)};
      }
      ASSERT_EQ(works.size(), 3u);
      for (auto& work : works) ASSERT_TRUE(work->Wait(absl::Seconds(60)).ok());
      EXPECT_EQ(Values<float>(a), Reference<float>(2, kSmall, 0, ReduceOp::kSum)) << "rank " << rank;
      EXPECT_EQ(Values<float>(b), Reference<float>(2, kSmall, 1, ReduceOp::kSum)) << "rank " << rank;
      EXPECT_EQ(Values<float>(c), Reference<float>(2, kLarge, 2, ReduceOp::kSum)) << "rank " << rank;
      // Issue-order completion: each Work was completed no earlier than the one issued before it.
      EXPECT_LE(works[0]->EndTime(), works[1]->EndTime()) << "rank " << rank;
      EXPECT_LE(works[1]->EndTime(), works[2]->EndTime()) << "rank " << rank;
    }, options);
  }
};

// Rank 1 stays away until rank 0's second thread has issued b, which it does once a holds its place in
// issue order (calls_issued): a, still spinning inline for its late peer, must keep the queue's turn.
TEST_F(ShmInlineTest, ACallIssuedWhileAnotherRunsInlineQueuesBehindIt) {
  ProcessGroupShmOptions options;
  options.timeout = absl::Seconds(60);
  options.channel.spin = absl::Seconds(30);  // the inline attempt outlasts rank 1's absence
  options.channel.contention = &QuietCpus();
  std::atomic<bool> b_issued{false};
  Run(options, [&] { return b_issued.load(); }, [&](ProcessGroupShm& group, Tensor a, Tensor b, Tensor c) {
    std::vector<std::shared_ptr<Work>> works(3);
    std::thread second([&] {
      EXPECT_TRUE(WaitUntil([&] { return group.calls_issued() >= 1; })) << "a was never issued";
      works[1] = group.AllReduce(b);
      EXPECT_FALSE(works[1]->IsCompleted()) << "b ran inline while a held the queue's turn";
      b_issued = true;
      works[2] = group.AllReduce(c);
    });
    works[0] = group.AllReduce(a);
    EXPECT_TRUE(works[0]->IsCompleted()) << "a did not complete inline";
    second.join();
    return works;
  });
}

// Rank 1 stays away until rank 0 has issued all three: the caller must not block on its late peer.
TEST_F(ShmInlineTest, AnInlineCallWhosePeerIsLateContinuesOnTheWorker) {
  ProcessGroupShmOptions options;
  options.timeout = absl::Seconds(60);
  options.channel.spin = absl::Microseconds(30);
  std::atomic<bool> all_issued{false};
  Run(options, [&] { return all_issued.load(); }, [&](ProcessGroupShm& group, Tensor a, Tensor b, Tensor c) {
    std::vector<std::shared_ptr<Work>> works = {group.AllReduce(a), group.AllReduce(b), group.AllReduce(c)};
    EXPECT_FALSE(works[0]->IsCompleted()) << "a completed without its peer";
    all_issued = true;
    return works;
  });
}

TEST(ShmObjectsTest, ObjectCollectivesFromTheBaseClass) {
  RunShmRanks(3, [](int rank, ProcessGroup& group) {
    std::string data = rank == 2 ? std::string("hello\0world", 11) : "stale";
    ASSERT_TRUE(group.BroadcastObject(&data, 2).ok());
    EXPECT_EQ(data, std::string("hello\0world", 11));
    std::vector<std::string> all;
    ASSERT_TRUE(group.AllGatherObject(std::string(rank * 3, 'x'), &all).ok());
    ASSERT_EQ(all.size(), 3u);
    for (int q = 0; q < 3; ++q) EXPECT_EQ(all[q], std::string(q * 3, 'x'));
  });
}

TEST(ShmSegmentsTest, NothingIsLeftInDevShm) {
  ProcessGroupShmOptions options;
  options.channel.name_tag = absl::StrCat("ddp-shm-test-", getpid());
  RunShmRanks(3, [&](int rank, ProcessGroup& group) {
    // Create unlinked the names once every rank had mapped every segment, before any collective (the
    // barrier makes sure every rank's Create returned).
    ASSERT_TRUE(group.Barrier()->Wait(absl::Seconds(60)).ok());
    EXPECT_TRUE(ShmEntries(options.channel.name_tag).empty());
    Tensor t = Input<float>(rank, 100000, 0, DType::kFloat32);
    ASSERT_TRUE(group.AllReduce(t)->Wait(absl::Seconds(60)).ok());
  }, options);
  EXPECT_TRUE(ShmEntries(options.channel.name_tag).empty());
}

// Two ranks' groups over `store`, created at once (each Create waits for the other), driven by the test.
std::vector<std::unique_ptr<ProcessGroupShm>> CreateTwoRanks(Store& store, const ProcessGroupShmOptions& options) {
  std::vector<std::unique_ptr<ProcessGroupShm>> groups(2);
  std::thread peer([&] { groups[1] = *ProcessGroupShm::Create(store, 1, 2, options); });
  groups[0] = *ProcessGroupShm::Create(store, 0, 2, options);
  peer.join();
  return groups;
}

// Note [Spinning while the process waits]: a thread blocked in a Work's Wait makes the group's waits
// for a late peer spin (the collective runs on the worker, or on the waiter itself).
TEST(ShmWaitTest, WaitingOnAWorkMakesTheGroupSpinForALatePeer) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "one CPU: two ranks oversubscribe it";
  ProcessGroupShmOptions options;
  options.channel.spin_while_waited = absl::Seconds(20);
  options.channel.contention = &QuietCpus();
  MemoryStore store;
  std::vector<std::unique_ptr<ProcessGroupShm>> groups = CreateTwoRanks(store, options);
  for (int64_t n : {int64_t{10}, int64_t{100000}}) {  // the inline path, then the slots
    const uint64_t spins_before = groups[0]->wait_long_spins();
    Tensor late = Input<float>(1, n, 0, DType::kFloat32);
    std::thread peer([&] {  // arrives once rank 0's wait spins long, which it must while rank 0 waits
      EXPECT_TRUE(WaitUntil([&] { return groups[0]->wait_long_spins() > spins_before; })) << n << " elements";
      EXPECT_TRUE(groups[1]->AllReduce(late)->Wait(absl::Seconds(60)).ok());
    });
    Tensor t = Input<float>(0, n, 0, DType::kFloat32);
    EXPECT_TRUE(groups[0]->AllReduce(t)->Wait(absl::Seconds(60)).ok());
    peer.join();
    EXPECT_EQ(Values<float>(t), Reference<float>(2, n, 0, ReduceOp::kSum));
    EXPECT_GE(groups[0]->wait_long_spins(), spins_before + 1) << n << " elements";
  }
}

TEST(ShmTimeoutTest, TheErrorNamesTheCollectiveAndTheRankWaitedFor) {
  ProcessGroupShmOptions options;
  options.timeout = absl::Milliseconds(300);
  MemoryStore store;
  std::vector<std::unique_ptr<ProcessGroupShm>> groups = CreateTwoRanks(store, options);
  Tensor t = Input<float>(0, 10, 0, DType::kFloat32);
  const absl::Time start = absl::Now();
  absl::Status status = groups[0]->AllReduce(t)->Wait(absl::Seconds(10));  // rank 1 never calls
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "AllReduce(sum) #0 of 10 float32 on rank 0/2 (shm)")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "waiting for rank 1")) << status;
  // The group is broken: later collectives fail at once, and the peer learns it from the abort word.
  EXPECT_FALSE(groups[0]->Barrier()->Wait(absl::Seconds(10)).ok());
  Tensor late = Input<float>(1, 10, 0, DType::kFloat32);  // rank 1's side of the same call
  groups[1]->AllReduce(late)->Wait(absl::Seconds(10)).IgnoreError();  // may pass: rank 0 posted step 1
  absl::Status peer_status = groups[1]->Barrier()->Wait(absl::Seconds(10));
  EXPECT_EQ(peer_status.code(), absl::StatusCode::kUnavailable) << peer_status;
  EXPECT_TRUE(absl::StrContains(peer_status.message(), "rank 0 failed")) << peer_status;
}

TEST(ShmTimeoutTest, ACallersShorterWaitNamesTheCollective) {
  ProcessGroupShmOptions options;
  options.timeout = absl::Seconds(30);
  MemoryStore store;
  std::vector<std::unique_ptr<ProcessGroupShm>> groups = CreateTwoRanks(store, options);
  Tensor t = Input<float>(0, 100000, 0, DType::kFloat32);  // beyond the inline path: queued
  std::shared_ptr<Work> work = groups[0]->AllReduce(t);
  absl::Status status = work->Wait(absl::Milliseconds(100));  // rank 1 has not called yet
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "AllReduce(sum) #0 of 100000 float32 on rank 0/2 (shm): not "
                                                  "completed after 100ms")) << status;
  Tensor u = Input<float>(1, 100000, 0, DType::kFloat32);
  EXPECT_TRUE(groups[1]->AllReduce(u)->Wait(absl::Seconds(30)).ok());
  EXPECT_TRUE(work->Wait(absl::Seconds(30)).ok());
}

TEST(ShmCreateTest, AMissingRankIsNamed) {
  ProcessGroupShmOptions options;
  options.timeout = absl::Milliseconds(300);
  MemoryStore store;
  auto group = ProcessGroupShm::Create(store, 0, 2, options);
  ASSERT_FALSE(group.ok());
  EXPECT_TRUE(absl::StrContains(group.status().message(), "rank 1 never published")) << group.status();
}

}  // namespace
}  // namespace ddp
