// ProcessGroupShm where /dev/shm is too small for the segments (a container's, mounted in a private
// mount namespace of a forked child): every rank fails at once, naming /dev/shm's size and the bytes
// needed, instead of a SIGBUS at the first collective (Note [Segments every rank can reserve] in
// comm/shm/shm_channel.cc). Skipped where mount namespaces are not permitted.
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "comm/shm/process_group_shm.h"
#include "comm/shm/small_dev_shm.h"
#include "gtest/gtest.h"
#include "store/memory_store.h"
#include "tensor/factory.h"
#include "testing/child_process.h"

namespace ddp {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
// A segment: one page of control block and two slots of the default 1 MiB.
constexpr size_t kSegmentBytes = 4096 + 2 * kMiB;

// Two ranks (threads) join and all-reduce once; the status of each rank's attempt.
std::vector<absl::Status> JoinTwoRanks() {
  MemoryStore store;
  std::vector<absl::Status> statuses(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      ProcessGroupShmOptions options;
      options.timeout = absl::Seconds(60);
      auto group = ProcessGroupShm::Create(store, rank, 2, options);
      if (!group.ok()) {
        statuses[rank] = group.status();
        return;
      }
      Tensor t = Full({int64_t{1} << 18}, 1.0f);  // 1 MiB: the whole slot is written
      statuses[rank] = (*group)->AllReduce(t)->Wait(absl::Seconds(60));
    });
  }
  for (std::thread& t : ranks) t.join();
  return statuses;
}

// OK when every rank failed as a full /dev/shm should make it fail; else what was wrong.
absl::Status EveryRankFailedNamingDevShm(const std::vector<absl::Status>& statuses, size_t dev_shm_bytes) {
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    const absl::Status& s = statuses[rank];
    const std::string size = absl::StrCat("/dev/shm has ", dev_shm_bytes, " bytes");
    const std::string needed = absl::StrCat("cannot reserve ", kSegmentBytes, " bytes");
    if (s.ok() || !IsShmSegmentUnavailable(s) || !absl::StrContains(s.message(), size) ||
        !absl::StrContains(s.message(), needed)) {
      return absl::InternalError(absl::StrCat("rank ", rank, ": expected a failure naming \"", size, "\" and \"",
                                              needed, "\", got: ", s.ToString()));
    }
  }
  return absl::OkStatus();
}

TEST(ProcessGroupShmSmallDevShmTest, EveryRankFailsNamingDevShmsSizeAndTheBytesNeeded) {
  const ChildRun run = RunInChild([] { return MountSmallDevShm(kMiB); },
                                  [] { return EveryRankFailedNamingDevShm(JoinTwoRanks(), kMiB); });
  if (run.skipped) GTEST_SKIP() << "no private /dev/shm: " << run.status.message();
  EXPECT_TRUE(run.status.ok()) << run.status;
}

// Room for one segment: the rank that gets it fails too, with the other rank's reason, at once rather
// than after waiting for that rank's segment until the timeout.
TEST(ProcessGroupShmSmallDevShmTest, ARankThatReservedItsSegmentFailsWithThePeerThatCouldNot) {
  const size_t dev_shm = 3 * kMiB;
  const ChildRun run = RunInChild([&] { return MountSmallDevShm(dev_shm); },
                                  [&] { return EveryRankFailedNamingDevShm(JoinTwoRanks(), dev_shm); });
  if (run.skipped) GTEST_SKIP() << "no private /dev/shm: " << run.status.message();
  EXPECT_TRUE(run.status.ok()) << run.status;
}

}  // namespace
}  // namespace ddp
