// End-to-end tests of the ddprun binary on small shell commands (and one real store rendezvous).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/cgroup_dir.h"
#include "base/memory_cgroup.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/process.h"
#include "testing/wait_until.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using RunResult = ProcessResult;

// Runs ddprun with `args`; sends `signal` to it after `signal_after` (when signal != 0). Kills it and
// fails the test if it runs longer than `timeout`.
RunResult RunDdprun(const std::vector<std::string>& args, absl::Duration timeout = absl::Seconds(20),
                    int signal = 0, absl::Duration signal_after = absl::ZeroDuration()) {
  std::vector<std::string> argv = {Runfile("launch/ddprun")};
  argv.insert(argv.end(), args.begin(), args.end());
  RunOptions options;
  options.timeout = timeout;
  options.signal = signal;
  options.signal_after = signal_after;
  return RunProcess(argv, options);
}

TEST(LauncherTest, ThreeWorkersGetTheirEnvironment) {
  RunResult r = RunDdprun({"--nproc_per_node=3", "--master_port=0", "/bin/sh", "-c",
                           "echo R=$RANK W=$WORLD_SIZE L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE "
                           "G=$GROUP_RANK A=$MASTER_ADDR C=$TORCHELASTIC_RESTART_COUNT "
                           "D=$DDP_RESTART_COUNT S=$DDP_STORE_IN_LAUNCHER T=${#DDP_JOB_TOKEN} "
                           "P=$MASTER_PORT SP=$DDP_STORE_PORT O=$OMP_NUM_THREADS"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> ports;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string expected = absl::StrCat("[rank ", rank, "] R=", rank, " W=3 L=", rank,
                                              " LW=3 G=0 A=127.0.0.1 C=0 D=0 S=1 T=32 P=");
    EXPECT_THAT(r.out, HasSubstr(expected));
    const size_t at = r.out.find(expected);
    if (at != std::string::npos) {
      ports.insert(r.out.substr(at + expected.size(), r.out.find('\n', at) - at - expected.size()));
    }
  }
  ASSERT_EQ(ports.size(), 1u) << r.out;  // Everyone got the same, real ports.
  const std::vector<std::string> p = absl::StrSplit(*ports.begin(), ' ');
  ASSERT_EQ(p.size(), 3u) << r.out;
  EXPECT_NE(p[0], "0");
  EXPECT_NE(p[0], "SP=0");
  EXPECT_NE(absl::StrCat("SP=", p[0]), p[1]) << "the store must not hold the workers' MASTER_PORT";
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    EXPECT_EQ(p[2], "O=1");
    EXPECT_THAT(r.err, HasSubstr("Setting OMP_NUM_THREADS environment variable for each process to be 1"));
  }
}

TEST(LauncherTest, WorkersRendezvousThroughTheLaunchersStore) {
  RunResult r = RunDdprun({"--nproc_per_node=3", "--master_port=0",
                           Runfile("launch/store_rendezvous_check")});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("[rank ", rank, "] rendezvous ok")));
  }
}

TEST(LauncherTest, FailingWorkerStopsTheOthersAndSetsTheExitCode) {
  RunResult r = RunDdprun({"--nproc_per_node=3", "--master_port=0", "--grace_period_s=2", "--",
                           "/bin/sh", "-c",
                           "if [ \"$RANK\" = 1 ]; then echo boom-line; sleep 0.2; exit 3; fi; "
                           "exec sleep 60"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_LT(r.elapsed, absl::Seconds(10));  // The sleep 60 workers were stopped.
  EXPECT_THAT(r.err, HasSubstr("rank 1 failed first with exit code 3"));
  EXPECT_THAT(r.err, HasSubstr("| boom-line"));
}

TEST(LauncherTest, WorkerThatIgnoresSigtermIsKilledAfterTheGracePeriod) {
  RunResult r = RunDdprun({"--nproc_per_node=2", "--master_port=0", "--grace_period_s=0.3",
                           "/bin/sh", "-c",
                           "if [ \"$RANK\" = 0 ]; then sleep 0.3; exit 4; fi; "
                           "trap '' TERM; sleep 60 & wait"});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_GE(r.elapsed, absl::Milliseconds(550));  // Rank 1 outlived SIGTERM by the grace period.
  EXPECT_LT(r.elapsed, absl::Seconds(10));
}

TEST(LauncherTest, WorkerKilledBySignalGives128PlusSignal) {
  RunResult r = RunDdprun({"--master_port=0", "/bin/sh", "-c", "kill -9 $$"});
  EXPECT_EQ(r.exit_code, 128 + 9);
  EXPECT_THAT(r.err, HasSubstr("rank 0 failed first with exit code 137 (signal 9, SIGKILL; peak RSS "));
  if (ReadMemoryCgroupState().cgroup_oom_kills.has_value()) {
    EXPECT_THAT(r.err, HasSubstr("the kernel's OOM killer killed nothing meanwhile, so the SIGKILL was sent "
                                 "(kill -9, a job scheduler, the worker itself)"));
  }
}

// A cgroup below this process's own for `controller` ("memory", "cpu"), removed at destruction (its
// processes must have ended). Set() fails where this process may not make one (not root, a read-only
// cgroupfs, no such controller).
class ScopedCgroup {
 public:
  explicit ScopedCgroup(const std::string& controller) {
    const std::optional<CgroupDir> parent = FindCgroupDir(controller);
    if (!parent.has_value()) return;
    v2_ = parent->v2;
    dir_ = absl::StrCat(parent->path, "/ddp_launcher_test_", controller, "_", getpid());
    if (::mkdir(dir_.c_str(), 0755) != 0) dir_.clear();
  }
  ~ScopedCgroup() {
    // The kernel may take a moment to let the directory of reaped processes go.
    if (!dir_.empty()) WaitUntil([&] { return ::rmdir(dir_.c_str()) == 0; }, absl::Seconds(5));
  }
  // Writes `value` to the cgroup's file `v1_file` (cgroup v1) or `v2_file`; false when it cannot.
  bool Set(const std::string& v1_file, const std::string& v2_file, const std::string& value) {
    if (dir_.empty()) return false;
    return static_cast<bool>(std::ofstream(dir_ + "/" + (v2_ ? v2_file : v1_file)) << value << std::flush);
  }
  const std::string& dir() const { return dir_; }
  // `command` as a command line that first moves itself into this cgroup, so what it starts runs there.
  std::vector<std::string> Inside(const std::vector<std::string>& command) const {
    std::vector<std::string> argv = {"/bin/sh", "-c", "echo $$ > \"$0\"/cgroup.procs && shift && exec \"$@\"",
                                     dir_, "/bin/sh"};
    argv.insert(argv.end(), command.begin(), command.end());
    return argv;
  }

 private:
  std::string dir_;
  bool v2_ = false;
};

TEST(LauncherTest, AWorkerTheOomKillerKilledIsNamed) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3 to allocate with";
  ScopedCgroup cgroup("memory");
  if (!cgroup.Set("memory.limit_in_bytes", "memory.max", std::to_string(96 << 20))) {
    GTEST_SKIP() << "cannot make a memory cgroup here (needs root and a writable cgroupfs)";
  }
  // ddprun moves itself into the limited cgroup first, so its workers start there; rank 1 touches 400 MiB.
  RunOptions options;
  options.timeout = absl::Seconds(30);
  RunResult r = RunProcess(
      cgroup.Inside({Runfile("launch/ddprun"), "--nproc_per_node=2", "--master_port=0", "--grace_period_s=2",
                     "/bin/sh", "-c",
                     "if [ \"$RANK\" = 1 ]; then exec /usr/bin/python3 -c 'b = bytearray(400 << 20)'; fi; "
                     "exec sleep 30"}),
      options);
  if (r.exit_code == 0) GTEST_SKIP() << "rank 1 was not killed under the limit (swap?): " << r.err;
  EXPECT_EQ(r.exit_code, 137) << r.err;
  EXPECT_THAT(r.err, HasSubstr("rank 1 failed first with exit code 137 (signal 9, SIGKILL; peak RSS "));
  EXPECT_THAT(r.err, HasSubstr("): the kernel's OOM killer killed 1 process of this job's memory cgroup (" +
                               cgroup.dir() +
                               ") while it ran: its workers needed more than the cgroup's limit of "
                               "96.0 MiB; a smaller batch, fewer workers per node or more memory avoids it"));
  EXPECT_LT(r.elapsed, absl::Seconds(15));  // the sleeping rank was stopped
}

TEST(LauncherTest, RestartRecoversAFailureOfTheFirstAttempt) {
  const std::vector<std::string> program = {
      "/bin/sh", "-c",
      "if [ \"$DDP_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ]; then exit 5; fi; "
      "echo attempt=$TORCHELASTIC_RESTART_COUNT"};
  std::vector<std::string> args = {"--nproc_per_node=2", "--master_port=0", "--max_restarts=1"};
  args.insert(args.end(), program.begin(), program.end());
  RunResult r = RunDdprun(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[rank 1] attempt=1"));
  EXPECT_THAT(r.err, HasSubstr("restarting"));
  // Without restarts the same program fails with the worker's code.
  args[2] = "--max_restarts=0";
  EXPECT_EQ(RunDdprun(args).exit_code, 5);
}

TEST(LauncherTest, RedirectAndRankPrefixes) {
  const std::vector<std::string> program = {"/bin/sh", "-c", "echo out$RANK; echo err$RANK >&2"};
  std::vector<std::string> args = {"--nproc_per_node=2", "--master_port=0", "--redirect=errors"};
  args.insert(args.end(), program.begin(), program.end());
  RunResult errors = RunDdprun(args);
  ASSERT_EQ(errors.exit_code, 0);
  EXPECT_THAT(errors.out, HasSubstr("[rank 0] out0\n"));
  EXPECT_THAT(errors.out, Not(HasSubstr("out1")));
  EXPECT_THAT(errors.err, HasSubstr("[rank 0] err0\n"));
  EXPECT_THAT(errors.err, HasSubstr("[rank 1] err1\n"));
  args[2] = "--redirect=none";
  RunResult none = RunDdprun(args);
  EXPECT_THAT(none.out, HasSubstr("[rank 0] out0\n"));
  EXPECT_THAT(none.out + none.err, Not(HasSubstr("1\n")));
}

TEST(LauncherTest, LogDirKeepsOneFilePerRank) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/ddprun_logs_", ::getpid());
  RunResult r = RunDdprun({"--nproc_per_node=2", "--master_port=0", "--redirect=none",
                           absl::StrCat("--log_dir=", dir), "/bin/sh", "-c",
                           "echo line-of-$RANK; echo err-of-$RANK >&2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(absl::StrCat(dir, "/rank_", rank, ".log"));
    std::stringstream content;
    content << in.rdbuf();
    EXPECT_THAT(content.str(), HasSubstr(absl::StrCat("line-of-", rank, "\n")));
    EXPECT_THAT(content.str(), HasSubstr(absl::StrCat("err-of-", rank, "\n")));
  }
}

TEST(LauncherTest, SigtermIsForwardedToTheWorkers) {
  RunResult r = RunDdprun({"--nproc_per_node=2", "--master_port=0", "/bin/sh", "-c",
                           "trap 'echo got-term; exit 0' TERM; sleep 60 & wait"},
                          absl::Seconds(20), SIGTERM, absl::Milliseconds(500));
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
  EXPECT_LT(r.elapsed, absl::Seconds(10));
  EXPECT_THAT(r.out, HasSubstr("[rank 0] got-term"));
  EXPECT_THAT(r.out, HasSubstr("[rank 1] got-term"));
}

TEST(LauncherTest, UsageErrors) {
  RunResult no_program = RunDdprun({"--nproc_per_node=2"});
  EXPECT_EQ(no_program.exit_code, 2);
  EXPECT_THAT(no_program.err, HasSubstr("no script to run was given"));
  RunResult bad_redirect = RunDdprun({"--redirect=some", "true"});
  EXPECT_EQ(bad_redirect.exit_code, 2);
  RunResult missing = RunDdprun({"--master_port=0", "/nonexistent/program"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("the script /nonexistent/program does not exist"));
  RunResult cannot_exec = RunDdprun({"--master_port=0", "--no_python", "/nonexistent/program"});
  EXPECT_EQ(cannot_exec.exit_code, 127);
  EXPECT_THAT(cannot_exec.err, HasSubstr("cannot execute /nonexistent/program"));
}

TEST(LauncherTest, BusyStorePortIsAClearError) {
  // Two launchers on the same fixed port: the second cannot host the store. It starts once the first's
  // store listens; the first's worker outlives the second launcher's attempt by a wide margin.
  const int port = 20000 + ::getpid() % 20000;
  std::vector<std::string> first_args = {absl::StrCat("--master_port=", port), "/bin/sh", "-c", "sleep 5"};
  pid_t first = ::fork();
  if (first == 0) {
    RunResult ignored = RunDdprun(first_args);
    ::_exit(ignored.exit_code);
  }
  ASSERT_TRUE(WaitUntil([&] { return AcceptsConnections(port); })) << "the first launcher's store never listened";
  RunResult second = RunDdprun({absl::StrCat("--master_port=", port), "true"});
  int status = 0;
  ::waitpid(first, &status, 0);
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_THAT(second.err, HasSubstr("cannot start the store"));
}

// A multi-node job's store listens beyond one process, so every node must share a token: without one
// ddprun refuses to start, saying how to give it.
TEST(LauncherTest, AMultiNodeJobWithoutATokenIsRefused) {
  const int port = 20000 + ::getpid() % 20000;
  RunResult r = RunDdprun({"--nnodes=2", "--node_rank=0", absl::StrCat("--master_port=", port), "true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("a job of --nnodes=2 needs a job token shared by every node's ddprun"));
  EXPECT_THAT(r.err, HasSubstr("--job_token_file"));
  RunResult both = RunDdprun({"--job_token=a", "--job_token_file=/tmp/x", "true"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_THAT(both.err, HasSubstr("give --job_token or --job_token_file, not both"));
}

// Two nodes (two ddpruns on this host) share a token through a file that node 0 creates: node 1, started
// first, waits for it; the workers of both nodes rendezvous in node 0's store with it, under one job id.
TEST(LauncherTest, NodesShareATokenFileThatNodeZeroCreates) {
  const std::string file = absl::StrCat(::testing::TempDir(), "/job_token_", ::getpid());
  ::unlink(file.c_str());
  const int port = 20000 + (::getpid() + 7) % 20000;
  auto node = [&](int rank) {
    return std::vector<std::string>{"--nnodes=2", absl::StrCat("--node_rank=", rank), absl::StrCat("--master_port=", port),
                                    absl::StrCat("--job_token_file=", file), "--", "/bin/sh", "-c",
                                    absl::StrCat("echo id=$DDP_JOB_ID token=$DDP_JOB_TOKEN; exec ",
                                                 Runfile("launch/store_rendezvous_check"))};
  };
  pid_t node1 = ::fork();
  if (node1 == 0) {
    RunResult r = RunDdprun(node(1), absl::Seconds(60));
    std::ofstream(file + ".node1") << r.out << r.err;
    ::_exit(r.exit_code);
  }
  RunResult node0 = RunDdprun(node(0), absl::Seconds(60));
  int status = 0;
  ::waitpid(node1, &status, 0);
  std::stringstream node1_out;
  node1_out << std::ifstream(file + ".node1").rdbuf();
  EXPECT_EQ(node0.exit_code, 0) << node0.out << node0.err;
  EXPECT_EQ(WEXITSTATUS(status), 0) << node1_out.str();
  std::stringstream token;
  token << std::ifstream(file).rdbuf();
  ASSERT_EQ(token.str().size(), 33u) << "32 hex digits and a newline";
  EXPECT_THAT(node0.out, HasSubstr(absl::StrCat("token=", token.str().substr(0, 32))));
  EXPECT_THAT(node1_out.str(), HasSubstr(absl::StrCat("token=", token.str().substr(0, 32))));
  EXPECT_THAT(node0.out, HasSubstr("[rank 0] rendezvous ok"));
  EXPECT_THAT(node1_out.str(), HasSubstr("[rank 1] rendezvous ok"));
  const size_t at = node0.out.find("id=");
  ASSERT_NE(at, std::string::npos);
  const std::string id = node0.out.substr(at, node0.out.find(' ', at) - at);
  EXPECT_EQ(id.size(), 3u + 16u) << id;
  EXPECT_THAT(node1_out.str(), HasSubstr(id)) << "both nodes carry node 0's job id";
}

// --nproc_per_node=cpu counts the CPUs the cgroup's quota allows, not the host's.
TEST(LauncherTest, NprocPerNodeCpuFollowsTheCgroupsCpuQuota) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "one CPU: a 1-CPU quota would change nothing";
  ScopedCgroup cgroup("cpu");
  if (!cgroup.Set("cpu.cfs_quota_us", "cpu.max", "100000")) GTEST_SKIP() << "cannot make a cpu cgroup here";
  RunResult r = RunProcess(cgroup.Inside({Runfile("launch/ddprun"), "--nproc_per_node=cpu", "--master_port=0",
                                          "/bin/sh", "-c", "echo W=$WORLD_SIZE"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("W=1")) << r.out;
}

}  // namespace
}  // namespace ddp
