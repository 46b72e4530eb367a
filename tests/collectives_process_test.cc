// The communication layer end to end, with real processes: ddprun starts tests/collective_worker,
// which joins the group (env://, tcp:// or file://) and checks every collective against a sequential
// reference; and a rank SIGKILLed in the middle of an all-reduce must fail the job quickly with the
// survivors' errors naming the collective, their rank and the lost rank.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dirent.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/process.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

using RunResult = ProcessResult;

// Runs ddprun with `args` and the extra environment `env` (NAME=value). Kills it (and fails the test)
// when it runs longer than `timeout`.
RunResult RunDdprun(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                    absl::Duration timeout = absl::Seconds(60)) {
  std::vector<std::string> argv = {Runfile("launch/ddprun")};
  argv.insert(argv.end(), args.begin(), args.end());
  RunOptions options;
  options.env = env;
  options.timeout = timeout;
  return RunProcess(argv, options);
}

// A loopback port that was free a moment ago (the kernel's pick for port 0).
int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

void ExpectEveryRankPassed(const RunResult& r, int world) {
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("[rank ", rank, "] collective_worker rank ", rank, "/", world,
                                              ": all ")))
        << r.all();
  }
}

class CollectivesProcessTest : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesProcessTest, EveryCollectiveMatchesTheReference) {
  const int world = GetParam();
  std::vector<std::string> args = {absl::StrCat("--nproc_per_node=", world), "--master_port=0",
                                   Runfile("tests/collective_worker")};
  if (world == 2) args.push_back("--large");  // One 64 MiB all-reduce (about 1 s here).
  const RunResult r = RunDdprun(args);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  ExpectEveryRankPassed(r, world);
  // Gloo also checks NewGroup: the odd ranks all-reduce over their subgroup while ranks 0 and 2
  // exchange tensors, then a MonitoredBarrier (tests/collective_worker.cc, CheckSubgroup).
  for (int rank = 0; rank < world && world > 1; ++rank) {
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("collective_worker rank ", rank, "/", world, ": subgroup [",
                                              world == 4 ? "1, 3" : "1", "] checked")))
        << r.all();
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesProcessTest, ::testing::Values(1, 2, 3, 4));

// Entries of /dev/shm whose name starts with `tag`.
std::vector<std::string> ShmEntries(const std::string& tag) {
  std::vector<std::string> out;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) {
      if (std::string(e->d_name).rfind(tag, 0) == 0) out.push_back(e->d_name);
    }
    closedir(dir);
  }
  return out;
}

class ShmCollectivesProcessTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmCollectivesProcessTest, EveryCollectiveMatchesTheReferenceAndNoSegmentIsLeft) {
  const int world = GetParam();
  const std::string tag = absl::StrCat("ddp-shm-ptest-", ::getpid(), "-", world);
  std::vector<std::string> args = {absl::StrCat("--nproc_per_node=", world), "--master_port=0",
                                   Runfile("tests/collective_worker"), "--backend=shm"};
  if (world == 2) args.push_back("--large");
  const RunResult r = RunDdprun(args, {absl::StrCat("DDP_SHM_NAME_TAG=", tag)});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  ExpectEveryRankPassed(r, world);
  EXPECT_TRUE(ShmEntries(tag).empty());
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmCollectivesProcessTest, ::testing::Values(1, 2, 3, 4));

// All-reduces of NewCommBuffer tensors between processes: each rank opens the others' heaps through
// /proc/<pid>/fd (Note [Zero-copy all-reduce]), which ranks as threads never exercise; zero-copy must be on.
TEST(ShmCollectivesProcessTest, CommBuffersAreReadInPlaceAcrossProcesses) {
  const std::string tag = absl::StrCat("ddp-shm-ptest-zc-", ::getpid());
  const RunResult r = RunDdprun({"--nproc_per_node=3", "--master_port=0", Runfile("tests/collective_worker"),
                                 "--backend=shm", "--comm_buffer", "--large"},
                                {absl::StrCat("DDP_SHM_NAME_TAG=", tag)});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  ExpectEveryRankPassed(r, 3);
  const size_t off = r.all().find("no zero-copy buckets");
  if (off != std::string::npos) {
    const std::string why = r.all().substr(off, r.all().find('\n', off) - off);
    // Only a system that forbids reading another process's descriptors (ptrace rules) excuses it.
    if (absl::StrContains(why, "Permission denied") || absl::StrContains(why, "Operation not permitted")) {
      GTEST_SKIP() << "this system does not let a process open its peers' memfds: " << why;
    }
    ADD_FAILURE() << "zero-copy was off: " << why;
  }
  EXPECT_TRUE(ShmEntries(tag).empty());
}

TEST(CollectivesProcessInitTest, AutoPicksShmOnOneHost) {
  const RunResult r = RunDdprun({"--nproc_per_node=2", "--master_port=0", Runfile("tests/collective_worker"),
                                 "--backend=auto"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.out, HasSubstr("backend shm)")) << r.all();
  ExpectEveryRankPassed(r, 2);
}

TEST(CollectivesProcessInitTest, FileInitMethod) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/collectives_store_", ::getpid());
  ::unlink(path.c_str());
  const RunResult r = RunDdprun({"--nproc_per_node=2", "--master_port=0", Runfile("tests/collective_worker"),
                                 absl::StrCat("--init_method=file://", path)});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.out, HasSubstr("joined via file://"));
  ExpectEveryRankPassed(r, 2);
  ::unlink(path.c_str());
}

TEST(CollectivesProcessInitTest, TcpInitMethodWithTheStoreInRankZero) {
  // ddprun hosts its own store on another port; the workers' store is served by rank 0 at this one.
  const std::string url = absl::StrCat("tcp://127.0.0.1:", FreeLoopbackPort());
  const RunResult r = RunDdprun({"--nproc_per_node=2", "--master_port=0", Runfile("tests/collective_worker"),
                                 absl::StrCat("--init_method=", url)});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("joined via ", url)));
  ExpectEveryRankPassed(r, 2);
}

TEST(CollectivesProcessFailureTest, TheCheckerCatchesAWrongResult) {
  const RunResult r = RunDdprun({"--nproc_per_node=2", "--master_port=0", "--grace_period_s=2",
                                 Runfile("tests/collective_worker"), "--corrupt_at_rank=1"});
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("[rank 1] collective_worker rank 1: FAILED: MISMATCH in AllReduce(sum) n=1 "
                                 "on rank 1/2: element 0"));
}

void ExpectSurvivorsReportTheDeadRank(const std::vector<std::string>& worker_flags) {
  // Rank 2 dies 1.5 s into a loop of 16 MiB all-reduces. The survivors must report the failed
  // all-reduce (a closed connection, or at worst DDP_TIMEOUT_S) and ddprun must exit with rank 2's
  // signal. The grace period outlasts the timeout so that ddprun's SIGTERM cannot hide the errors.
  std::vector<std::string> args = {"--nproc_per_node=4", "--master_port=0", "--grace_period_s=15",
                                   Runfile("tests/collective_worker"), "--die_at_rank=2", "--die_after_ms=1500"};
  args.insert(args.end(), worker_flags.begin(), worker_flags.end());
  const RunResult r = RunDdprun(args, {"DDP_TIMEOUT_S=10"}, absl::Seconds(45));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.all();
  EXPECT_LT(r.elapsed, absl::Seconds(30)) << r.all();
  EXPECT_THAT(r.err, HasSubstr("rank 2 failed first with exit code 137 (signal 9, SIGKILL; peak RSS "))
      << r.all();
  int survivors_reporting = 0;
  for (int rank : {0, 1, 3}) {
    const std::string report = absl::StrCat("[rank ", rank, "] collective_worker rank ", rank,
                                            ": collective failed after ");
    const size_t at = r.all().find(report);
    if (at == std::string::npos) continue;
    ++survivors_reporting;
    const std::string line = r.all().substr(at, r.all().find('\n', at) - at);
    EXPECT_THAT(line, HasSubstr("AllReduce(sum)"));
    EXPECT_THAT(line, HasSubstr(absl::StrCat("on rank ", rank, "/4")));
    // Whichever peer's socket this rank saw close, the failure reports name the rank that was lost.
    EXPECT_THAT(line, HasSubstr("[failure reports: lost rank 2 (")) << "rank " << rank;
  }
  // Every survivor reports (each waits for its own error before exiting, see collective_worker.cc).
  EXPECT_EQ(survivors_reporting, 3) << r.all();
}

TEST(CollectivesProcessFailureTest, SigkilledRankFailsTheSurvivorsCollective) {
  ExpectSurvivorsReportTheDeadRank({});
}

// The same without the worker's own SIGPIPE workaround: libgloo 0.5 writes with writev, so a survivor
// that writes to the dead rank's socket is killed by SIGPIPE (exit 141, no error printed) unless SIGPIPE
// is ignored, which InitProcessGroup / ProcessGroupGloo::Create do themselves.
TEST(CollectivesProcessFailureTest, SurvivorsReportWithTheDefaultSigpipeAction) {
  ExpectSurvivorsReportTheDeadRank({"--ignore_sigpipe=false"});
}

// Over shared memory the survivors notice the dead process itself (pidfd, every 100 ms) or a peer's
// abort word: each fails within 2 s naming rank 2, and nothing is left in /dev/shm.
// With and without NewCommBuffer tensors (--comm_buffer: the survivors may be reading the dead rank's heap).
class ShmKillTest : public ::testing::TestWithParam<bool> {};

TEST_P(ShmKillTest, ShmSurvivorsNameTheSigkilledRankWithinTwoSeconds) {
  const std::string tag = absl::StrCat("ddp-shm-kill-", ::getpid());
  std::vector<std::string> args = {"--nproc_per_node=4", "--master_port=0", "--grace_period_s=15",
                                   Runfile("tests/collective_worker"), "--backend=shm", "--die_at_rank=2",
                                   "--die_after_ms=1500"};
  if (GetParam()) args.push_back("--comm_buffer");
  const RunResult r = RunDdprun(args, {"DDP_TIMEOUT_S=10", absl::StrCat("DDP_SHM_NAME_TAG=", tag)}, absl::Seconds(45));
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.all();
  for (int rank : {0, 1, 3}) {
    const std::string report = absl::StrCat("[rank ", rank, "] collective_worker rank ", rank,
                                            ": collective failed after ");
    const size_t at = r.all().find(report);
    ASSERT_NE(at, std::string::npos) << "rank " << rank << " did not report\n" << r.all();
    const std::string line = r.all().substr(at, r.all().find('\n', at) - at);
    EXPECT_THAT(line, HasSubstr("AllReduce(sum)"));
    EXPECT_THAT(line, HasSubstr(absl::StrCat("on rank ", rank, "/4 (shm)")));
    EXPECT_THAT(line, HasSubstr("lost rank 2 (")) << "rank " << rank;
    const size_t s = line.find(" s after the last success");
    ASSERT_NE(s, std::string::npos) << line;
    const double seconds = std::atof(line.substr(line.rfind('(', s) + 1).c_str());
    EXPECT_LT(seconds, 2.0) << line;
  }
  EXPECT_TRUE(ShmEntries(tag).empty());
}

INSTANTIATE_TEST_SUITE_P(Buffers, ShmKillTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "comm_buffer" : "ordinary";
                         });

}  // namespace
}  // namespace ddp
