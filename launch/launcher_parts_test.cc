// The pure parts of ddprun: worker environment, output routing, exit codes (the command line:
// torchrun_args_test.cc).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "launch/launcher.h"
#include "launch/rank_output.h"
#include "launch/worker_env.h"
#include "launch/worker_process.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

using ::testing::ElementsAre;

TEST(WorkerEnvironmentTest, GlobalRankAndWorldSizeSpanNodes) {
  JobLayout layout;
  layout.nproc_per_node = 4;
  layout.nnodes = 2;
  layout.node_rank = 1;
  layout.master_addr = "10.0.0.1";
  layout.master_port = 1234;
  layout.restart_count = 2;
  layout.job_token = "tok";
  auto env = WorkerEnvironment(layout, 3);
  EXPECT_EQ(env["RANK"], "7");
  EXPECT_EQ(env["WORLD_SIZE"], "8");
  EXPECT_EQ(env["LOCAL_RANK"], "3");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "1234");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(env["DDP_RESTART_COUNT"], "2");
  EXPECT_EQ(env["DDP_JOB_TOKEN"], "tok");
  EXPECT_EQ(env["DDP_STORE_IN_LAUNCHER"], "1");
  layout.job_token = "";
  EXPECT_EQ(WorkerEnvironment(layout, 0).count("DDP_JOB_TOKEN"), 0u);
}

// Every variable torchrun 1.13 sets; ddprun's store on its own port (Note [Two ports]).
TEST(WorkerEnvironmentTest, TorchrunsVariablesAndTheStoreOffMasterPort) {
  JobLayout layout;
  layout.nproc_per_node = 3;
  layout.nnodes = 2;
  layout.node_rank = 1;
  layout.master_addr = "10.0.0.1";
  layout.master_port = 1234;
  layout.store_port = 29500;
  layout.max_restarts = 4;
  auto env = WorkerEnvironment(layout, 2);
  EXPECT_EQ(env["ROLE_RANK"], "5");
  EXPECT_EQ(env["ROLE_WORLD_SIZE"], "6");
  EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "4");
  EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "none");
  EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "False");
  EXPECT_EQ(env["MASTER_PORT"], "1234");
  EXPECT_EQ(env["DDP_STORE_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["DDP_STORE_PORT"], "29500");
  EXPECT_EQ(env.count("OMP_NUM_THREADS"), 0u);
  layout.default_omp_num_threads = true;
  EXPECT_EQ(WorkerEnvironment(layout, 0)["OMP_NUM_THREADS"], "1");
}

TEST(LineSplitterTest, SplitsAcrossChunksAndCutsLongLines) {
  LineSplitter splitter(/*max_line_bytes=*/4);
  EXPECT_THAT(splitter.Feed("ab\nc"), ElementsAre("ab"));
  EXPECT_THAT(splitter.Feed("d\n\n"), ElementsAre("cd", ""));
  EXPECT_THAT(splitter.Feed("123456"), ElementsAre("1234"));
  EXPECT_EQ(splitter.Finish(), "56");
}

// Reads what was written to the read end of a pipe so far.
std::string Drain(int fd) {
  std::string all;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) all.append(buffer, n);
  return all;
}

TEST(RankOutputTest, RedirectErrorsPrintsOnlyStderrOfOtherRanks) {
  int out[2], err[2], log[2];
  ASSERT_EQ(::pipe2(out, O_NONBLOCK), 0);
  ASSERT_EQ(::pipe2(err, O_NONBLOCK), 0);
  ASSERT_EQ(::pipe2(log, O_NONBLOCK), 0);
  RankOutput rank1(1, RedirectMode::kErrors, out[1], err[1], log[1], /*tail_lines=*/2);
  rank1.Feed(RankOutput::Stream::kStdout, "hello\nwor");
  rank1.Feed(RankOutput::Stream::kStderr, "oops\n");
  rank1.Feed(RankOutput::Stream::kStdout, "ld");
  rank1.Finish();
  EXPECT_EQ(Drain(out[0]), "");
  EXPECT_EQ(Drain(err[0]), "[rank 1] oops\n");
  EXPECT_EQ(Drain(log[0]), "hello\noops\nworld\n");
  EXPECT_THAT(rank1.Tail(), ElementsAre("oops", "world"));
  RankOutput rank0(0, RedirectMode::kNone, out[1], err[1], -1);
  rank0.Feed(RankOutput::Stream::kStdout, "always\n");
  EXPECT_EQ(Drain(out[0]), "[rank 0] always\n");
  for (int fd : {out[0], out[1], err[0], err[1], log[0], log[1]}) ::close(fd);
}

TEST(RedirectModeTest, Parses) {
  RedirectMode mode;
  EXPECT_TRUE(ParseRedirectMode("none", &mode));
  EXPECT_EQ(mode, RedirectMode::kNone);
  EXPECT_FALSE(ParseRedirectMode("stdout", &mode));
}

TEST(ExitCodeTest, SignalsAre128Plus) {
  EXPECT_EQ(ExitCodeFromWaitStatus(3 << 8), 3);   // WIFEXITED with status 3.
  EXPECT_EQ(ExitCodeFromWaitStatus(9), 128 + 9);  // Killed by SIGKILL.
}

TEST(ValidateLaunchOptionsTest, RejectsBadRanges) {
  LaunchOptions o;
  o.command = {"true"};
  EXPECT_TRUE(ValidateLaunchOptions(o).ok());
  o.node_rank = 1;
  EXPECT_FALSE(ValidateLaunchOptions(o).ok());
  o = LaunchOptions();
  EXPECT_FALSE(ValidateLaunchOptions(o).ok());  // No command.
  o.command = {"true"};
  o.nnodes = 2;
  o.master_port = 0;
  EXPECT_FALSE(ValidateLaunchOptions(o).ok());
}

// --nproc_per_node=100000 would try to fork 100000 workers; the bound is named in the error.
TEST(ValidateLaunchOptionsTest, BoundsWorkersPerNode) {
  LaunchOptions o;
  o.command = {"true"};
  o.nproc_per_node = kMaxProcPerNode;
  EXPECT_TRUE(ValidateLaunchOptions(o).ok());
  o.nproc_per_node = 100000;
  EXPECT_EQ(ValidateLaunchOptions(o).message(), "--nproc_per_node must be in [1, 1024] (workers on this node), got 100000");
  o.nproc_per_node = 0;
  EXPECT_EQ(ValidateLaunchOptions(o).message(), "--nproc_per_node must be in [1, 1024] (workers on this node), got 0");
}

}  // namespace
}  // namespace ddp
