// Fault tolerance of train/train under ddprun, end to end with real processes:
//  * a worker SIGKILLed in the middle of a backward pass makes every survivor fail within the timeout
//    with an error naming the lost rank, and ddprun exit non-zero;
//  * with --max_restarts the group restarts from the last checkpoint, completes, and the sample log
//    proves that every sample of the epoch was trained on exactly once (and the weights equal an
//    undisturbed run's, bit for bit);
//  * a checkpoint resumed under a different world size continues the epoch with no sample lost or
//    repeated (beyond DistributedSampler's padding).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "train/sample_log.h"
#include "gmock/gmock.h"
#include "testing/process.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kTrainSize = 60000;  // Fashion-MNIST's training set

std::vector<std::string> Train(const std::vector<std::string>& launcher_flags,
                               const std::vector<std::string>& train_flags) {
  std::vector<std::string> argv = {Runfile("launch/ddprun"), "--master_port=0"};
  argv.insert(argv.end(), launcher_flags.begin(), launcher_flags.end());
  argv.push_back(Runfile("train/train"));
  argv.insert(argv.end(), train_flags.begin(), train_flags.end());
  return argv;
}

ProcessResult RunJob(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
  RunOptions options;
  options.env = env;
  options.timeout = absl::Seconds(240);
  return RunProcess(argv, options);
}

std::vector<SampleLogEntry> ReadLog(const std::string& path) {
  absl::StatusOr<std::vector<SampleLogEntry>> entries = ReadSampleLog(path);
  EXPECT_TRUE(entries.ok()) << entries.status();
  return entries.ok() ? *entries : std::vector<SampleLogEntry>();
}

// How often each sample index occurs in `entries` of epoch `epoch`.
std::map<int64_t, int> Occurrences(const std::vector<SampleLogEntry>& entries, int epoch) {
  std::map<int64_t, int> count;
  for (const SampleLogEntry& e : entries) {
    if (e.epoch != epoch) continue;
    for (int64_t id : e.ids) ++count[id];
  }
  return count;
}

// The survivors of a 4-rank job whose rank 2 dies during the backward pass of step 21 each fail with an
// error that names rank 2, well within DDP_TIMEOUT_S; ddprun exits with rank 2's signal. Returns the
// output; `backend` is the --backend flag.
ProcessResult KillRank2DuringBackward(const std::string& backend) {
  const ProcessResult r =
      RunJob(Train({"--nproc_per_node=4", "--grace_period_s=20"},
                   {"--model=mlp", "--epochs=1", "--max_steps=200", "--fault_inject_step=20",
                    "--fault_inject_point=backward", "--fault_inject_rank=2", "--backend=" + backend}),
             {"DDP_TIMEOUT_S=30"});
  EXPECT_EQ(r.exit_code, 128 + 9) << r.all();
  EXPECT_LT(r.elapsed, absl::Seconds(30)) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("rank 2 kills itself during the backward pass of step 21"));
  EXPECT_THAT(r.err,
              HasSubstr("ddprun: rank 2 failed first with exit code 137 (signal 9, SIGKILL; peak RSS "));
  return r;
}

// Survivor `rank`'s error line, or "" (failing the test) when it printed none.
std::string SurvivorLine(const ProcessResult& r, int rank) {
  const std::string prefix = absl::StrCat("[rank ", rank, "] train: UNAVAILABLE: DDP bucket");
  const size_t at = r.all().find(prefix);
  EXPECT_NE(at, std::string::npos) << "rank " << rank << " did not report\n" << r.all();
  return at == std::string::npos ? "" : r.all().substr(at, r.all().find('\n', at) - at);
}

TEST(FaultToleranceTest, WorkerKilledDuringBackwardFailsTheOthersNamingIt) {
  const ProcessResult r = KillRank2DuringBackward("gloo");
  for (int rank : {0, 1, 3}) {
    const std::string line = SurvivorLine(r, rank);
    EXPECT_THAT(line, HasSubstr(absl::StrCat("on rank ", rank, "/4 (gloo) failed")));
    // ddprun recorded how rank 2 ended, so the survivors name it without waiting for a report window.
    EXPECT_THAT(
        line,
        HasSubstr("[failure reports: lost rank 2 (launcher: exit code 137 (signal 9, SIGKILL; peak RSS "));
  }
}

// The same over shared memory (train's default on one host): waiters notice the dead process.
TEST(FaultToleranceTest, WorkerKilledDuringBackwardOverShmFailsTheOthersNamingIt) {
  const ProcessResult r = KillRank2DuringBackward("shm");
  for (int rank : {0, 1, 3}) {
    const std::string line = SurvivorLine(r, rank);
    EXPECT_THAT(line, HasSubstr(absl::StrCat("on rank ", rank, "/4 (shm) failed")));
    EXPECT_THAT(line, HasSubstr("lost rank 2"));
  }
}

// The same fault under --max_restarts=1 with a checkpoint every 10 steps: the group restarts from step
// 20's checkpoint and completes the epoch. The steps that shaped the final model (the sample log's
// effective steps) used every training sample exactly once, in exactly the batches of an undisturbed
// run, and the final weights equal the undisturbed run's.
TEST(FaultToleranceTest, RestartedGroupCompletesAndUsesEverySampleOnce) {
  const std::vector<std::string> common = {"--model=mlp", "--epochs=1", "--lr_schedule=constant",
                                           "--checkpoint_every=10", "--resume"};
  auto flags = [&](const std::string& name) {
    std::vector<std::string> f = common;
    f.push_back("--checkpoint_dir=" + TempPath("ck_" + name));
    f.push_back("--log_samples=" + TempPath(name + ".log"));
    f.push_back("--save=" + TempPath(name + ".safetensors"));
    return f;
  };
  std::vector<std::string> checked = flags("undisturbed");
  checked.push_back("--check_sync_every=50");  // replicas stay identical (ddp/desync_check.h)
  const ProcessResult undisturbed = RunJob(Train({"--nproc_per_node=4"}, checked));
  ASSERT_EQ(undisturbed.exit_code, 0) << undisturbed.all();
  std::vector<std::string> faulty = flags("restarted");
  faulty.insert(faulty.end(), {"--fault_inject_step=25", "--fault_inject_point=backward", "--fault_inject_rank=2"});
  const ProcessResult restarted = RunJob(Train({"--nproc_per_node=4", "--max_restarts=1"}, faulty));
  ASSERT_EQ(restarted.exit_code, 0) << restarted.all();
  EXPECT_THAT(restarted.all(), HasSubstr("restarting the worker group (restart 1 of 1)"));
  EXPECT_THAT(restarted.all(), HasSubstr("resuming from"));
  EXPECT_THAT(restarted.all(), HasSubstr("step 20, epoch 1"));

  const std::vector<SampleLogEntry> log = ReadLog(TempPath("restarted.log"));
  std::set<int> attempts;
  for (const SampleLogEntry& e : log) attempts.insert(e.attempt);
  EXPECT_EQ(attempts, (std::set<int>{0, 1})) << "both attempts logged steps";
  const std::vector<SampleLogEntry> effective = EffectiveSteps(log);
  const std::map<int64_t, int> seen = Occurrences(effective, 1);
  EXPECT_EQ(static_cast<int64_t>(seen.size()), kTrainSize) << "samples never trained on";
  for (const auto& [id, times] : seen) ASSERT_EQ(times, 1) << "sample " << id << " trained on " << times << " times";
  const std::vector<SampleLogEntry> reference = EffectiveSteps(ReadLog(TempPath("undisturbed.log")));
  ASSERT_EQ(effective.size(), reference.size());
  for (size_t i = 0; i < effective.size(); ++i) {
    ASSERT_EQ(effective[i].ids, reference[i].ids) << "step " << effective[i].step << " rank " << effective[i].rank;
  }
  const ProcessResult cmp = RunShell("cmp " + TempPath("undisturbed.safetensors") + " " +
                                     TempPath("restarted.safetensors"));
  EXPECT_EQ(cmp.exit_code, 0) << cmp.out;
}

// A 2-rank run checkpoints at step 40 and stops at step 50; 3 ranks resume from step 40 and finish the
// epoch. Over the steps that count (the first run's 1..40, the second run's all), every sample appears,
// and the only repeats are DistributedSampler's padding of the remainder to a multiple of 3.
TEST(FaultToleranceTest, ResumeUnderAnotherWorldSizeLosesAndRepeatsNoSample) {
  const std::string dir = TempPath("ck_world"), first = TempPath("world2.log"), second = TempPath("world3.log");
  const ProcessResult two = RunJob(Train({"--nproc_per_node=2"},
                                      {"--model=mlp", "--epochs=1", "--max_steps=50", "--checkpoint_every=40",
                                       "--checkpoint_dir=" + dir, "--log_samples=" + first}));
  ASSERT_EQ(two.exit_code, 0) << two.all();
  const ProcessResult three = RunJob(Train({"--nproc_per_node=3"}, {"--model=mlp", "--epochs=1", "--resume",
                                                                 "--checkpoint_dir=" + dir, "--log_samples=" + second}));
  ASSERT_EQ(three.exit_code, 0) << three.all();
  EXPECT_THAT(three.all(), HasSubstr("step 40, epoch 1, 5120 samples of the epoch consumed"));
  std::vector<SampleLogEntry> counted;
  for (const SampleLogEntry& e : ReadLog(first)) {
    if (e.step <= 40) counted.push_back(e);
  }
  for (const SampleLogEntry& e : ReadLog(second)) {
    EXPECT_GT(e.step, 40);
    EXPECT_EQ(e.world_size, 3);
    counted.push_back(e);
  }
  const std::map<int64_t, int> seen = Occurrences(counted, 1);
  EXPECT_EQ(static_cast<int64_t>(seen.size()), kTrainSize) << "samples never trained on";
  const int64_t remainder = kTrainSize - 40 * 2 * 64;  // 54880: padded by 2 to 54882 = 3 x 18294
  int64_t repeats = 0;
  for (const auto& [id, times] : seen) {
    ASSERT_LE(times, 2) << "sample " << id;
    repeats += times - 1;
  }
  EXPECT_EQ(repeats, (3 - remainder % 3) % 3);
}

}  // namespace
}  // namespace ddp
