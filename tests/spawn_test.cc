// Spawn starts real processes: runs tests/spawn_check (which calls Spawn on itself) and checks its
// ranks rendezvous, that a failing rank is named with how it ended while the others are stopped (and
// named in the survivors' errors through the exit notice), that SIGINT/SIGTERM reach every rank, that
// the ranks die with a SIGKILLed parent, and that nprocs is bounded.
#include "launch/spawn.h"

#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/process.h"
#include "testing/wait_until.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ProcessResult RunSpawnCheck(std::vector<std::string> args, int signal = 0,
                            absl::Duration signal_after = absl::ZeroDuration()) {
  args.insert(args.begin(), Runfile("tests/spawn_check"));
  RunOptions options;
  options.timeout = absl::Seconds(60);
  options.signal = signal;
  options.signal_after = signal_after;
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
  EXPECT_THAT(r.err, HasSubstr("Spawn: rank 1 failed first with exit code 1"));
  EXPECT_THAT(r.err, HasSubstr("spawned rank 1: INVALID_ARGUMENT: bad shape"));
  EXPECT_THAT(r.out, Not(HasSubstr("spawn ok")));
}

TEST(SpawnTest, ASignalIsNamedAndTheOthersAreStopped) {
  const ProcessResult r =
      RunSpawnCheck({"--nprocs=3", "--fail_rank=2", "--fail_how=signal", "--others_sleep_s=50"});
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_THAT(r.err,
              HasSubstr("Spawn: rank 2 failed first with exit code 137 (signal 9, SIGKILL; peak RSS "));
  EXPECT_LT(r.elapsed, absl::Seconds(30)) << "the sleeping ranks were not stopped";
}

// Rank 1 dies of SIGKILL while rank 0 waits for it in an all-reduce: Spawn writes the exit notice before
// stopping the others, so rank 0's error names rank 1 and how it ended, as under ddprun.
TEST(SpawnTest, ARankLostInACollectiveIsNamedInTheSurvivorsError) {
  const ProcessResult r = RunSpawnCheck({"--nprocs=2", "--fail_rank=1", "--fail_how=signal_in_group"});
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_THAT(r.err,
              HasSubstr("Spawn: rank 1 failed first with exit code 137 (signal 9, SIGKILL; peak RSS "));
  EXPECT_THAT(r.all(), HasSubstr("[rank 0] spawned rank 0: "));
  EXPECT_THAT(r.all(), HasSubstr("lost rank 1 (launcher: exit code 137 (signal 9, SIGKILL; peak RSS "));
  EXPECT_LT(r.elapsed, absl::Seconds(30)) << r.all();
}

// The parent is SIGKILLed while its ranks sleep: the ranks are gone within a second (they die with the
// parent), instead of running on as orphans.
TEST(SpawnTest, RanksDieWithASigkilledParent) {
  ASSERT_TRUE(BecomeChildSubreaper());  // the orphaned ranks become ours to watch and reap
  const std::string output = TempPath("spawn_killed_parent.out");
  std::unique_ptr<BackgroundProcess> parent =
      BackgroundProcess::Start({Runfile("tests/spawn_check"), "--nprocs=2", "--others_sleep_s=50"}, {}, output);
  ASSERT_NE(parent, nullptr);
  ASSERT_TRUE(WaitUntil([&] {
    const std::string out = parent->Output();
    return out.find("[rank 0] before Spawn") != std::string::npos &&
           out.find("[rank 1] before Spawn") != std::string::npos;
  })) << parent->Output();
  const std::vector<pid_t> ranks = ChildrenOf(parent->pid());
  ASSERT_EQ(ranks.size(), 2u);
  parent->Signal(SIGKILL);
  ASSERT_TRUE(parent->Wait(absl::Seconds(5)).has_value());
  const absl::Time killed = absl::Now();
  const bool gone = WaitUntil([&] { return ProcessEnded(ranks[0]) && ProcessEnded(ranks[1]); }, absl::Seconds(5));
  const absl::Duration took = absl::Now() - killed;
  for (pid_t rank : ranks) KillAndReap(rank);
  EXPECT_TRUE(gone) << "ranks still ran 5 s after their parent was killed";
  EXPECT_LT(took, absl::Seconds(1));
}

// nprocs is bounded as ddprun's --nproc_per_node is: a clear error, not an abort or a fork storm.
TEST(SpawnTest, NprocsOutOfRangeIsAnError) {
  for (const char* nprocs : {"--nprocs=0", "--nprocs=-3"}) {
    const ProcessResult r = RunSpawnCheck({nprocs});
    EXPECT_EQ(r.exit_code, 1) << r.all();
    EXPECT_THAT(r.err, HasSubstr("Spawn: nprocs must be in [1, 1024] (processes on this host), got ")) << r.all();
  }
}

class SpawnSignalTest : public ::testing::TestWithParam<int> {};

// A signal to the parent reaches every rank (each reports it), Spawn returns kCancelled naming it, and
// the ranks, which would otherwise sleep 50 s, are gone long before.
TEST_P(SpawnSignalTest, ASignalToTheParentReachesEveryRank) {
  const int signal = GetParam();
  const ProcessResult r = RunSpawnCheck({"--nprocs=3", "--others_sleep_s=50", "--report_signals"}, signal,
                                        absl::Seconds(3));
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("Spawn: interrupted by signal ", signal)));
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("[rank ", rank, "] rank ", rank, " got signal ", signal)));
  }
  EXPECT_LT(r.elapsed, absl::Seconds(30)) << r.all();
}

INSTANTIATE_TEST_SUITE_P(SigtermAndSigint, SpawnSignalTest, ::testing::Values(SIGTERM, SIGINT));

}  // namespace
}  // namespace ddp
