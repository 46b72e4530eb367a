// Spawn starts real processes: runs launch/spawn_check (which calls Spawn on itself) and checks its
// ranks rendezvous, and that a failing rank is named with how it ended while the others are stopped.
#include "launch/spawn.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/process.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ProcessResult RunSpawnCheck(std::vector<std::string> args) {
  args.insert(args.begin(), Runfile("launch/spawn_check"));
  RunOptions options;
  options.timeout = absl::Seconds(60);
  return RunProcess(args, options);
}

TEST(SpawnTest, ThreeProcessesJoinOneGroup) {
  const ProcessResult r = RunSpawnCheck({"--nprocs=3"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("[rank ", rank, "] rank ", rank, " of 3: sum 6 env ok")));
  }
  EXPECT_THAT(r.out, HasSubstr("spawn ok"));
  // The code before Spawn runs in the parent and in each child; the code after it in the parent only.
  EXPECT_EQ(r.out.find("spawn ok"), r.out.rfind("spawn ok"));
  EXPECT_THAT(r.out, HasSubstr("[rank 2] before Spawn (every process)"));
}

TEST(SpawnTest, AnErrorStatusNamesTheRankAndItsMessage) {
  const ProcessResult r = RunSpawnCheck({"--nprocs=2", "--fail_rank=1", "--fail_how=status"});
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_THAT(r.err, HasSubstr("Spawn: rank 1 failed first: it exited with code 1"));
  EXPECT_THAT(r.err, HasSubstr("spawned rank 1: INVALID_ARGUMENT: bad shape"));
  EXPECT_THAT(r.out, Not(HasSubstr("spawn ok")));
}

TEST(SpawnTest, ASignalIsNamedAndTheOthersAreStopped) {
  const ProcessResult r =
      RunSpawnCheck({"--nprocs=3", "--fail_rank=2", "--fail_how=signal", "--others_sleep_s=50"});
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_THAT(r.err, HasSubstr("Spawn: rank 2 failed first: it died of signal 9"));
  EXPECT_LT(r.elapsed, absl::Seconds(30)) << "the sleeping ranks were not stopped";
}

}  // namespace
}  // namespace ddp
