// Jobs stay apart and die together, with real processes (train/train, ddprun):
//  * ddprun SIGKILLed: its workers are gone within a second and never write --save;
//  * a second job started by hand on a running job's MASTER_PORT fails at once naming the port, and
//    the first job trains on undisturbed;
//  * SIGTERM or SIGINT during the rendezvous ends a rank within a second, not after DDP_TIMEOUT_S;
//  * --backend=mpi under ddprun (two MPI singletons with WORLD_SIZE=2) is refused naming both sizes.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/process.h"
#include "testing/wait_until.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A training run long enough to be interrupted (50 epochs of mlp would take minutes).
const std::vector<std::string> kLongTraining = {"--model=mlp", "--epochs=50", "--backend=gloo", "--num_workers=0"};

std::string Dir(const std::string& name) {
  const std::string dir = TempPath(absl::StrCat(name, "_", ::getpid()));
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

// Lines in the file at `path` so far (0 when missing).
int LineCount(const std::string& path) {
  std::ifstream in(path);
  int lines = 0;
  std::string line;
  while (std::getline(in, line)) ++lines;
  return lines;
}

bool Exists(const std::string& path) {
  struct stat info = {};
  return ::stat(path.c_str(), &info) == 0;
}

// train/train as rank `rank` of 2 started by hand on 127.0.0.1:`port`, with `flags`.
std::unique_ptr<BackgroundProcess> StartRank(int rank, int port, const std::vector<std::string>& flags,
                                             const std::string& output) {
  std::vector<std::string> argv = {Runfile("train/train")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return BackgroundProcess::Start(argv,
                                  {absl::StrCat("RANK=", rank), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                                   absl::StrCat("MASTER_PORT=", port), "DDP_TIMEOUT_S=30"},
                                  output);
}

// ddprun is SIGKILLed while its two workers train: the kernel ends them within a second (they die with
// their launcher), and the --save they would have written at the end never appears.
TEST(JobIsolationTest, WorkersDieWithASigkilledDdprunAndWriteNothing) {
  ASSERT_TRUE(BecomeChildSubreaper());  // the orphaned workers become ours to watch and reap
  const std::string dir = Dir("killed_ddprun");
  std::vector<std::string> argv = {Runfile("launch/ddprun"), "--nproc_per_node=2", "--master_port=0",
                                   Runfile("train/train")};
  argv.insert(argv.end(), kLongTraining.begin(), kLongTraining.end());
  argv.push_back(absl::StrCat("--log_samples=", dir, "/samples"));
  argv.push_back(absl::StrCat("--save=", dir, "/weights.safetensors"));
  std::unique_ptr<BackgroundProcess> ddprun = BackgroundProcess::Start(argv, {"DDP_TIMEOUT_S=30"}, dir + "/out");
  ASSERT_NE(ddprun, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return LineCount(dir + "/samples") >= 4; }, absl::Seconds(120)))
      << "the workers never trained\n" << ddprun->Output();
  const std::vector<pid_t> workers = ChildrenOf(ddprun->pid());
  ASSERT_EQ(workers.size(), 2u) << ddprun->Output();
  ddprun->Signal(SIGKILL);
  ASSERT_TRUE(ddprun->Wait(absl::Seconds(5)).has_value());
  const absl::Time killed = absl::Now();
  const bool gone = WaitUntil([&] { return ProcessEnded(workers[0]) && ProcessEnded(workers[1]); }, absl::Seconds(5));
  const absl::Duration took = absl::Now() - killed;
  for (pid_t worker : workers) KillAndReap(worker);
  EXPECT_TRUE(gone) << "workers still trained 5 s after ddprun was killed";
  EXPECT_LT(took, absl::Seconds(1)) << "workers outlived ddprun by " << took;
  EXPECT_FALSE(Exists(dir + "/weights.safetensors")) << "a worker wrote --save after its launcher died";
}

// Job A (two ranks started by hand) trains on MASTER_PORT; job B's rank 1 started on the same port
// fails within seconds naming the port, and B's rank 0 cannot host a store there; A's ranks train on
// and stop cleanly on SIGTERM.
TEST(JobIsolationTest, ASecondJobOnThePortFailsNamingItAndLeavesTheFirstAlone) {
  const std::string dir = Dir("second_job");
  const int port = FreeTcpPort();
  std::vector<std::string> flags = kLongTraining;
  flags.push_back(absl::StrCat("--log_samples=", dir, "/a_samples"));
  std::unique_ptr<BackgroundProcess> a0 = StartRank(0, port, flags, dir + "/a0");
  std::unique_ptr<BackgroundProcess> a1 = StartRank(1, port, flags, dir + "/a1");
  ASSERT_TRUE(a0 != nullptr && a1 != nullptr);
  ASSERT_TRUE(WaitUntil([&] { return LineCount(dir + "/a_samples") >= 4; }, absl::Seconds(120)))
      << "job A never trained\n" << a0->Output() << a1->Output();

  for (int rank : {1, 0}) {
    RunOptions options;
    options.env = {absl::StrCat("RANK=", rank), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                   absl::StrCat("MASTER_PORT=", port), "DDP_TIMEOUT_S=30"};
    options.timeout = absl::Seconds(60);
    std::vector<std::string> argv = {Runfile("train/train"), "--model=mlp", "--backend=gloo", "--max_steps=5",
                                     absl::StrCat("--save=", dir, "/b", rank, ".safetensors")};
    const ProcessResult b = RunProcess(argv, options);
    EXPECT_NE(b.exit_code, 0) << "job B's rank " << rank << " ran\n" << b.all();
    EXPECT_THAT(b.all(), HasSubstr(absl::StrCat(":", port))) << "job B's rank " << rank << " did not name the port";
    EXPECT_LT(b.elapsed, absl::Seconds(15)) << b.all();
    if (rank == 1) {
      EXPECT_THAT(b.all(), HasSubstr("rank 1 cannot join: the job at 127.0.0.1:"));
      EXPECT_THAT(b.all(), HasSubstr("(MASTER_ADDR:MASTER_PORT) already has a rank 1"));
    }
    EXPECT_FALSE(Exists(absl::StrCat(dir, "/b", rank, ".safetensors")));
  }

  const int seen = LineCount(dir + "/a_samples");
  EXPECT_TRUE(WaitUntil([&] { return LineCount(dir + "/a_samples") >= seen + 4; }, absl::Seconds(60)))
      << "job A stopped training\n" << a0->Output() << a1->Output();
  a0->Signal(SIGTERM);
  a1->Signal(SIGTERM);
  const std::optional<int> a0_code = a0->Wait(absl::Seconds(60));
  const std::optional<int> a1_code = a1->Wait(absl::Seconds(60));
  EXPECT_EQ(a0_code, 128 + SIGTERM) << a0->Output();
  EXPECT_EQ(a1_code, 128 + SIGTERM) << a1->Output();
  EXPECT_THAT(a0->Output() + a1->Output(), Not(HasSubstr("cannot join")));
}

class RendezvousSignalTest : public ::testing::TestWithParam<int> {};

// Rank 0 waits in the rendezvous for a rank 1 that never comes (DDP_TIMEOUT_S=60): a SIGTERM or SIGINT
// ends it within a second.
TEST_P(RendezvousSignalTest, ASignalDuringTheRendezvousEndsTheRankAtOnce) {
  const int signal = GetParam();
  const std::string dir = Dir(absl::StrCat("rendezvous_signal_", signal));
  const int port = FreeTcpPort();
  std::vector<std::string> argv = {Runfile("train/train"), "--model=mlp", "--backend=gloo"};
  std::unique_ptr<BackgroundProcess> rank0 = BackgroundProcess::Start(
      argv, {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", absl::StrCat("MASTER_PORT=", port), "DDP_TIMEOUT_S=60"},
      dir + "/out");
  ASSERT_NE(rank0, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return AcceptsConnections(port); }, absl::Seconds(60)))
      << "rank 0 never hosted the store\n" << rank0->Output();
  const absl::Time sent = absl::Now();
  rank0->Signal(signal);
  const std::optional<int> code = rank0->Wait(absl::Seconds(10));
  const absl::Duration took = absl::Now() - sent;
  ASSERT_TRUE(code.has_value()) << "rank 0 still waits 10 s after the signal\n" << rank0->Output();
  EXPECT_EQ(*code, 128 + signal) << rank0->Output();
  EXPECT_LT(took, absl::Seconds(1)) << rank0->Output();
}

INSTANTIATE_TEST_SUITE_P(SigtermAndSigint, RendezvousSignalTest, ::testing::Values(SIGTERM, SIGINT));

// ddprun around --backend=mpi starts processes that MPI sees as two worlds of one: each would train a
// model of its own and write the same files. Both are refused before training, naming both sizes.
TEST(JobIsolationTest, MpiSingletonsUnderDdprunAreRefusedNamingBothSizes) {
  const std::string dir = Dir("mpi_under_ddprun");
  RunOptions options;
  options.timeout = absl::Seconds(120);
  const ProcessResult r = RunProcess({Runfile("launch/ddprun"), "--nproc_per_node=2", "--master_port=0",
                                      Runfile("train/train"), "--model=mlp", "--backend=mpi", "--max_steps=2",
                                      absl::StrCat("--save=", dir, "/w.safetensors")},
                                     options);
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("backend mpi: MPI says world size 1 (this is its rank 0), but WORLD_SIZE=2"));
  EXPECT_FALSE(Exists(dir + "/w.safetensors"));
}

}  // namespace
}  // namespace ddp
