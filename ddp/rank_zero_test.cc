#include "ddp/rank_zero.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include "testing/run_ranks.h"
#include "gmock/gmock.h"
#include "nn/models.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

TEST(RankZeroTest, OkRunsOnceOnRankZero) {
  std::atomic<int> calls{0};
  RunRanks(3, [&](int rank, ProcessGroup& group) {
    const absl::Status status = RunOnRankZero(group, [&] {
      EXPECT_EQ(rank, 0);
      ++calls;
      return absl::OkStatus();
    });
    EXPECT_TRUE(status.ok()) << "rank " << rank << ": " << status;
  });
  EXPECT_EQ(calls.load(), 1);
}

TEST(RankZeroTest, FailureOnRankZeroReachesEveryRank) {
  RunRanks(3, [&](int rank, ProcessGroup& group) {
    const absl::Status status =
        RunOnRankZero(group, [] { return absl::ResourceExhaustedError("disk full"); });
    EXPECT_TRUE(absl::IsResourceExhausted(status)) << "rank " << rank << ": " << status;
    EXPECT_EQ(status.message(), "rank 0: disk full") << "rank " << rank;
    // The group is still usable: nobody is stuck in a collective.
    EXPECT_TRUE(group.Barrier()->Wait(absl::Seconds(30)).ok());
  });
}

TEST(RankZeroTest, SaveCheckpointCollective) {
  const std::string dir = ::testing::TempDir() + "/rank_zero_test_save";
  std::filesystem::remove_all(dir);
  Generator g(1);
  auto model = MakeModel("mlp", g);
  ASSERT_TRUE(model.ok()) << model.status();
  const Checkpoint checkpoint = CaptureCheckpoint(**model, nullptr, {}, nullptr, 4, 0);
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    const absl::Status status = SaveCheckpointCollective(group, dir, checkpoint);
    EXPECT_TRUE(status.ok()) << "rank " << rank << ": " << status;
    absl::StatusOr<Checkpoint> loaded = LoadLatestCheckpoint(dir);  // every rank reads it back
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->step, 4);
  });
  // A failed save (a file where step-5 must go) fails on every rank, naming the path.
  { std::ofstream(dir + "/step-5") << "x"; }
  Checkpoint next = checkpoint;
  next.step = 5;
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    const absl::Status status = SaveCheckpointCollective(group, dir, next);
    EXPECT_FALSE(status.ok()) << "rank " << rank;
    EXPECT_THAT(std::string(status.message()), HasSubstr(dir + "/step-5")) << "rank " << rank;
  });
}

}  // namespace
}  // namespace ddp
