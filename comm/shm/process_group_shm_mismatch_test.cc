// Ranks of a ProcessGroupShm that issue different collectives at the same point fail, naming both
// ranks' calls (Note [Call stamps] in comm/shm/call_stamp.h), instead of exchanging the wrong data.
// Ranks are threads over one MemoryStore.
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "comm/shm/process_group_shm.h"
#include "gtest/gtest.h"
#include "store/memory_store.h"
#include "tensor/factory.h"

namespace ddp {
namespace {

// Rank r runs calls[r] on its own group of two (a fresh pair per test); returns the status of each
// rank's last Work. The other Works must succeed.
using Calls = std::function<std::vector<std::shared_ptr<Work>>(ProcessGroup&)>;
std::vector<absl::Status> RunMismatched(const Calls& rank0, const Calls& rank1) {
  MemoryStore store;
  std::vector<absl::Status> last(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      ProcessGroupShmOptions options;
      options.timeout = absl::Seconds(30);
      auto group = ProcessGroupShm::Create(store, rank, 2, options);
      ASSERT_TRUE(group.ok()) << group.status();
      std::vector<std::shared_ptr<Work>> works = (rank == 0 ? rank0 : rank1)(**group);
      for (size_t i = 0; i + 1 < works.size(); ++i) {
        EXPECT_TRUE(works[i]->Wait(absl::Seconds(30)).ok()) << "rank " << rank << ", call " << i;
      }
      last[rank] = works.back()->Wait(absl::Seconds(30));
    });
  }
  for (std::thread& t : threads) t.join();
  return last;
}

Calls AllReduceOf(int64_t n, ReduceOp op = ReduceOp::kSum, DType dtype = DType::kFloat32) {
  return [=](ProcessGroup& group) -> std::vector<std::shared_ptr<Work>> {
    return {group.AllReduce(Zeros({n}, dtype), op)};
  };
}

// Each rank's status is FailedPrecondition, names this rank's call and says what rank `peer` called.
void ExpectMismatch(const std::vector<absl::Status>& statuses, const std::vector<std::string>& calls) {
  for (int rank = 0; rank < 2; ++rank) {
    const absl::Status& s = statuses[rank];
    const int peer = 1 - rank;
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << "rank " << rank << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), calls[rank])) << "rank " << rank << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("rank ", peer, " called ", calls[peer])))
        << "rank " << rank << ": " << s;
  }
}

TEST(ShmMismatchTest, AnotherElementCountOnTheInlinePath) {
  ExpectMismatch(RunMismatched(AllReduceOf(10), AllReduceOf(11)),
                 {"AllReduce(sum) #0 of 10 float32 on rank 0/2 (shm)", "AllReduce(sum) #0 of 11 float32 on rank 1/2 (shm)"});
}

TEST(ShmMismatchTest, AnotherReduceOp) {
  ExpectMismatch(RunMismatched(AllReduceOf(10, ReduceOp::kSum), AllReduceOf(10, ReduceOp::kMax)),
                 {"AllReduce(sum) #0 of 10 float32 on rank 0/2 (shm)", "AllReduce(max) #0 of 10 float32 on rank 1/2 (shm)"});
}

TEST(ShmMismatchTest, AnotherDtype) {
  ExpectMismatch(RunMismatched(AllReduceOf(10, ReduceOp::kSum, DType::kFloat32),
                               AllReduceOf(20, ReduceOp::kSum, DType::kFloat16)),
                 {"AllReduce(sum) #0 of 10 float32 on rank 0/2 (shm)", "AllReduce(sum) #0 of 20 float16 on rank 1/2 (shm)"});
}

// 10 floats travel inline, 1000 in the slot: the ranks wait on different words.
TEST(ShmMismatchTest, SizesThatTakeDifferentPaths) {
  ExpectMismatch(RunMismatched(AllReduceOf(10), AllReduceOf(1000)),
                 {"AllReduce(sum) #0 of 10 float32 on rank 0/2 (shm)", "AllReduce(sum) #0 of 1000 float32 on rank 1/2 (shm)"});
}

// Two-shot all-reduces of buckets whose sizes differ by one element (DDP with different bucket caps).
TEST(ShmMismatchTest, LargeAllReducesOfDifferentSizes) {
  ExpectMismatch(RunMismatched(AllReduceOf(200000), AllReduceOf(200001)),
                 {"AllReduce(sum) #0 of 200000 float32 on rank 0/2 (shm)",
                  "AllReduce(sum) #0 of 200001 float32 on rank 1/2 (shm)"});
}

TEST(ShmMismatchTest, ABroadcastAgainstABarrier) {
  ExpectMismatch(RunMismatched(
                     [](ProcessGroup& group) -> std::vector<std::shared_ptr<Work>> {
                       return {group.Broadcast(Zeros({4}, DType::kFloat32), 1)};
                     },
                     [](ProcessGroup& group) -> std::vector<std::shared_ptr<Work>> { return {group.Barrier()}; }),
                 {"Broadcast(root 1) #0 of 4 float32 on rank 0/2 (shm)", "Barrier #0 on rank 1/2 (shm)"});
}

// Every rank believes itself the root: nobody reads in that step, so the next call fails, naming both
// ranks' previous calls.
TEST(ShmMismatchTest, CallsNoRankReadsAreFoundAtTheNextCall) {
  const auto broadcast_then_all_reduce = [](int root) {
    return [root](ProcessGroup& group) -> std::vector<std::shared_ptr<Work>> {
      return {group.Broadcast(Zeros({4}, DType::kFloat32), root), group.AllReduce(Zeros({4}, DType::kFloat32))};
    };
  };
  const std::vector<absl::Status> statuses = RunMismatched(broadcast_then_all_reduce(0), broadcast_then_all_reduce(1));
  const std::string previous[] = {"Broadcast(root 0) #0 of 4 float32 on rank 0/2 (shm)",
                                  "Broadcast(root 1) #0 of 4 float32 on rank 1/2 (shm)"};
  for (int rank = 0; rank < 2; ++rank) {
    const absl::Status& s = statuses[rank];
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("AllReduce(sum) #1 of 4 float32 on rank ", rank, "/2 (shm)"))) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("rank ", 1 - rank, " issued other collectives before this "
                                                            "one: its previous call was ", previous[1 - rank],
                                                            ", this rank's ", previous[rank])))
        << s;
  }
}

TEST(ShmMismatchTest, MatchingCallsPass) {
  const std::vector<absl::Status> statuses = RunMismatched(AllReduceOf(10), AllReduceOf(10));
  EXPECT_TRUE(statuses[0].ok()) << statuses[0];
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];
}

}  // namespace
}  // namespace ddp
