// train/train --elastic under ddprun --elastic, end to end with real processes: rank 2 of 3 is SIGKILLed
// in the middle of the backward pass of step 21; the two survivors regroup and finish. Their final
// weights equal, bit for bit, those of a run that checkpoints step 20 at 3 ranks and resumes it at 2
// ranks, and the sample log's effective steps are that run's, sample for sample (no sample lost or
// repeated). Over Gloo and over shared memory.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "testing/process.h"
#include "train/sample_log.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Job(const std::vector<std::string>& launcher_flags, const std::vector<std::string>& train_flags) {
  std::vector<std::string> argv = {Runfile("launch/ddprun"), "--master_port=0"};
  argv.insert(argv.end(), launcher_flags.begin(), launcher_flags.end());
  argv.push_back(Runfile("train/train"));
  argv.insert(argv.end(), train_flags.begin(), train_flags.end());
  return argv;
}

ProcessResult RunJob(const std::vector<std::string>& argv) {
  RunOptions options;
  options.env = {"DDP_TIMEOUT_S=30"};
  options.timeout = absl::Seconds(240);
  return RunProcess(argv, options);
}

std::vector<SampleLogEntry> ReadLog(const std::string& path) {
  absl::StatusOr<std::vector<SampleLogEntry>> entries = ReadSampleLog(path);
  EXPECT_TRUE(entries.ok()) << entries.status();
  return entries.ok() ? *entries : std::vector<SampleLogEntry>();
}

// The flags every run of `backend` shares: 60 steps of the mlp, a constant learning rate.
std::vector<std::string> Common(const std::string& backend) {
  return {"--model=mlp", "--epochs=1", "--lr_schedule=constant", "--backend=" + backend};
}

void SurvivorsMatchACheckpointRestart(const std::string& backend) {
  const std::string tag = "elastic_" + backend;
  std::vector<std::string> elastic = Common(backend);
  elastic.insert(elastic.end(), {"--elastic", "--max_steps=60", "--fault_inject_step=20", "--fault_inject_rank=2",
                                 "--fault_inject_point=backward", "--log_samples=" + TempPath(tag + ".log"),
                                 "--save=" + TempPath(tag + ".safetensors")});
  const ProcessResult survived = RunJob(Job({"--elastic", "--nproc_per_node=3"}, elastic));
  ASSERT_EQ(survived.exit_code, 0) << survived.all();
  EXPECT_THAT(survived.all(), HasSubstr("rank 2 kills itself during the backward pass of step 21"));
  EXPECT_THAT(survived.all(), HasSubstr("ddprun: elastic: rank 2 exited with code 137"));
  EXPECT_THAT(survived.all(), HasSubstr("generation 1: launch ranks 0, 1 (completed steps 20, 20) formed: rank 0 of 2 "
                                        "continues from step 20 (epoch 1, 3840 samples of it consumed)"));
  EXPECT_THAT(survived.all(), HasSubstr("ddprun: elastic: the job finished without the lost rank(s) 2"));

  // The same change of world size by checkpoint and restart: 3 ranks to step 20, then 2 ranks from it.
  const std::string dir = TempPath("ck_" + tag);
  std::vector<std::string> first = Common(backend);
  first.insert(first.end(), {"--max_steps=20", "--checkpoint_every=20", "--checkpoint_dir=" + dir,
                             "--log_samples=" + TempPath(tag + "_first.log")});
  const ProcessResult three = RunJob(Job({"--nproc_per_node=3"}, first));
  ASSERT_EQ(three.exit_code, 0) << three.all();
  std::vector<std::string> second = Common(backend);
  second.insert(second.end(), {"--max_steps=60", "--resume", "--checkpoint_dir=" + dir,
                               "--log_samples=" + TempPath(tag + "_second.log"),
                               "--save=" + TempPath(tag + "_restarted.safetensors")});
  const ProcessResult two = RunJob(Job({"--nproc_per_node=2"}, second));
  ASSERT_EQ(two.exit_code, 0) << two.all();

  const ProcessResult cmp = RunShell("cmp " + TempPath(tag + ".safetensors") + " " +
                                     TempPath(tag + "_restarted.safetensors"));
  EXPECT_EQ(cmp.exit_code, 0) << "the survivors' weights differ from the checkpoint-and-restart run's\n" << cmp.out;

  std::vector<SampleLogEntry> reference = ReadLog(TempPath(tag + "_first.log"));
  for (const SampleLogEntry& e : ReadLog(TempPath(tag + "_second.log"))) reference.push_back(e);
  reference = EffectiveSteps(reference);
  const std::vector<SampleLogEntry> effective = EffectiveSteps(ReadLog(TempPath(tag + ".log")));
  ASSERT_EQ(effective.size(), 20u * 3 + 40u * 2);
  ASSERT_EQ(effective.size(), reference.size());
  std::set<int64_t> seen;
  for (size_t i = 0; i < effective.size(); ++i) {
    ASSERT_EQ(effective[i].step, reference[i].step);
    ASSERT_EQ(effective[i].rank, reference[i].rank);
    ASSERT_EQ(effective[i].world_size, effective[i].step <= 20 ? 3 : 2) << "step " << effective[i].step;
    ASSERT_EQ(effective[i].ids, reference[i].ids) << "step " << effective[i].step << " rank " << effective[i].rank;
    for (int64_t id : effective[i].ids) ASSERT_TRUE(seen.insert(id).second) << "sample " << id << " trained twice";
  }
  EXPECT_EQ(seen.size(), (20u * 3 + 40u * 2) * 64);
}

TEST(ElasticTest, SurvivorsOverGlooMatchACheckpointRestartBitForBit) { SurvivorsMatchACheckpointRestart("gloo"); }

TEST(ElasticTest, SurvivorsOverShmMatchACheckpointRestartBitForBit) { SurvivorsMatchACheckpointRestart("shm"); }

// Below --min_world_size the survivors stop, and the agreed step is saved as a checkpoint to resume from.
TEST(ElasticTest, BelowTheMinimumWorldSizeTheSurvivorsStopWithACheckpoint) {
  const std::string dir = TempPath("ck_elastic_min");
  std::vector<std::string> flags = Common("gloo");
  flags.insert(flags.end(), {"--elastic", "--max_steps=60", "--fault_inject_step=12", "--fault_inject_rank=0",
                             "--checkpoint_dir=" + dir});
  const ProcessResult r = RunJob(Job({"--elastic", "--min_world_size=3", "--nproc_per_node=3"}, flags));
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("fewer than the minimum world size 3"));
  EXPECT_THAT(r.all(), HasSubstr("stopped at step 12"));
  const ProcessResult listed = RunShell("ls " + dir);
  EXPECT_THAT(listed.out, HasSubstr("step-12")) << listed.out;
}

}  // namespace
}  // namespace ddp
