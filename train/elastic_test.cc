// train/train --elastic under ddprun --elastic, end to end with real processes: rank 2 of 3 is SIGKILLed
// in the middle of the backward pass of step 21; the two survivors regroup and finish. Their final
// weights equal, bit for bit, those of a run that checkpoints step 20 at 3 ranks and resumes it at 2
// ranks, and the sample log's effective steps are that run's, sample for sample (no sample lost or
// repeated). Over Gloo and over shared memory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "testing/process.h"
#include "train/elastic_test_jobs.h"
#include "train/sample_log.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

// How many times `needle` occurs in `text` (non-overlapping).
int CountOccurrences(const std::string& text, const std::string& needle) {
  int count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size()))
    ++count;
  return count;
}

// A step in [5, 40], drawn anew by each run of the test (the test names it when it fails).
int64_t RandomStep() {
  std::random_device device;
  return 5 + static_cast<int64_t>(device() % 36);
}

// Rank 2 of 3 dies at step `k` (`point`: after it, or in the backward pass of the next); the survivors'
// weights and sample log are compared with a run that checkpoints step k at 3 ranks and resumes at 2.
void SurvivorsMatchACheckpointRestart(const std::string& backend, int64_t k, const std::string& point) {
  SCOPED_TRACE(absl::StrCat("rank 2 killed at step ", k, " (", point, ") over ", backend));
  const std::string tag = absl::StrCat("elastic_", backend, "_", k);
  const std::string step = absl::StrCat(k);
  std::vector<std::string> elastic = Common(backend);
  elastic.insert(elastic.end(),
                 {"--elastic", "--max_steps=60", "--fault_inject_step=" + step, "--fault_inject_rank=2",
                  "--fault_inject_point=" + point, "--log_samples=" + TempPath(tag + ".log"),
                  "--save=" + TempPath(tag + ".safetensors")});
  const ProcessResult survived = RunJob(Job({"--elastic", "--nproc_per_node=3"}, elastic));
  ASSERT_EQ(survived.exit_code, 0) << survived.all();
  EXPECT_THAT(survived.all(),
              HasSubstr(point == "backward"
                            ? absl::StrCat("rank 2 kills itself during the backward pass of step ", k + 1)
                            : absl::StrCat("rank 2 kills itself after step ", k)));
  EXPECT_THAT(survived.all(),
              HasSubstr("ddprun: elastic: rank 2 failed with exit code 137 (signal 9, SIGKILL; peak RSS "));
  EXPECT_THAT(survived.all(), HasSubstr(absl::StrCat("generation 1: launch ranks 0, 1 (completed steps ", k,
                                                     ", ", k, ") formed: rank 0 of 2 continues from step ", k,
                                                     " (epoch 1, ", k * 3 * 64, " samples of it consumed)")));
  EXPECT_THAT(survived.all(), HasSubstr("ddprun: elastic: the job finished without the lost rank(s) 2"));

  // The same change of world size by checkpoint and restart: 3 ranks to step k, then 2 ranks from it.
  const std::string dir = TempPath("ck_" + tag);
  std::vector<std::string> first = Common(backend);
  first.insert(first.end(), {"--max_steps=" + step, "--checkpoint_every=" + step, "--checkpoint_dir=" + dir,
                             "--log_samples=" + TempPath(tag + "_first.log")});
  const ProcessResult three = RunJob(Job({"--nproc_per_node=3"}, first));
  ASSERT_EQ(three.exit_code, 0) << three.all();
  std::vector<std::string> second = Common(backend);
  second.insert(second.end(), {"--max_steps=60", "--resume", "--checkpoint_dir=" + dir,
                               "--log_samples=" + TempPath(tag + "_second.log"),
                               "--save=" + TempPath(tag + "_restarted.safetensors")});
  const ProcessResult two = RunJob(Job({"--nproc_per_node=2"}, second));
  ASSERT_EQ(two.exit_code, 0) << two.all();

  const ProcessResult cmp =
      RunShell("cmp " + TempPath(tag + ".safetensors") + " " + TempPath(tag + "_restarted.safetensors"));
  EXPECT_EQ(cmp.exit_code, 0) << "the survivors' weights differ from the checkpoint-and-restart run's\n"
                              << cmp.out;

  std::vector<SampleLogEntry> reference = ReadLog(TempPath(tag + "_first.log"));
  for (const SampleLogEntry& e : ReadLog(TempPath(tag + "_second.log"))) reference.push_back(e);
  reference = EffectiveSteps(reference);
  const std::vector<SampleLogEntry> effective = EffectiveSteps(ReadLog(TempPath(tag + ".log")));
  const size_t entries = static_cast<size_t>(k * 3 + (60 - k) * 2);
  ASSERT_EQ(effective.size(), entries);
  ASSERT_EQ(effective.size(), reference.size());
  std::set<int64_t> seen;
  for (size_t i = 0; i < effective.size(); ++i) {
    ASSERT_EQ(effective[i].step, reference[i].step);
    ASSERT_EQ(effective[i].rank, reference[i].rank);
    ASSERT_EQ(effective[i].world_size, effective[i].step <= k ? 3 : 2) << "step " << effective[i].step;
    ASSERT_EQ(effective[i].ids, reference[i].ids)
        << "step " << effective[i].step << " rank " << effective[i].rank;
    for (int64_t id : effective[i].ids)
      ASSERT_TRUE(seen.insert(id).second) << "sample " << id << " trained twice";
  }
  EXPECT_EQ(seen.size(), entries * 64);
}

TEST(ElasticTest, SurvivorsOverGlooMatchACheckpointRestartBitForBit) {
  SurvivorsMatchACheckpointRestart("gloo", RandomStep(), "after_step");
}

TEST(ElasticTest, SurvivorsOverShmMatchACheckpointRestartBitForBit) {
  SurvivorsMatchACheckpointRestart("shm", RandomStep(), "backward");
}

// The counts "N threads, M open files" that rank 0 printed for each generation, in order.
std::vector<std::pair<int, int>> Resources(const std::string& output) {
  std::vector<std::pair<int, int>> counts;
  const std::string marker = ": rank 0 holds ";
  for (size_t at = output.find(marker); at != std::string::npos; at = output.find(marker, at + 1)) {
    int threads = 0, files = 0;
    if (std::sscanf(output.c_str() + at + marker.size(), "%d threads, %d open files", &threads, &files) ==
        2) {
      counts.emplace_back(threads, files);
    }
  }
  return counts;
}

// Whether /dev/shm holds a segment whose name starts with `tag`.
bool ShmSegmentsLeft(const std::string& tag) {
  std::string listing;
  RunShell("ls /dev/shm", &listing);
  return listing.find(tag) != std::string::npos;
}

// Two failures in a row over shm: launch rank 2 dies after step 10 and launch rank 1 after step 20; launch
// rank 0 finishes alone. No sample is lost or trained twice, the process holds no more threads or files
// in a later generation than in an earlier one, and no shared-memory segment is left behind.
TEST(ElasticTest, TwoFailuresInARowLeaveOneRankThatFinishesWithoutLeaks) {
  const std::string tag = absl::StrCat("ddp-elastic-test-", getpid());
  std::vector<std::string> flags = Common("shm");
  flags.insert(flags.end(), {"--elastic", "--max_steps=40", "--fault_inject_step=10", "--fault_inject_rank=2",
                             "--fault_inject_more=1:20", "--log_samples=" + TempPath("two_failures.log")});
  RunOptions options;
  options.env = {"DDP_TIMEOUT_S=30", "DDP_SHM_NAME_TAG=" + tag};
  options.timeout = absl::Seconds(240);
  const ProcessResult r = RunProcess(Job({"--elastic", "--nproc_per_node=3"}, flags), options);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("generation 1: launch ranks 0, 1 (completed steps 10, 10) formed"));
  EXPECT_THAT(r.all(),
              HasSubstr("generation 2: launch rank 0 (completed steps 20) formed: rank 0 of 1 continues from "
                        "step 20"));
  const std::vector<SampleLogEntry> effective = EffectiveSteps(ReadLog(TempPath("two_failures.log")));
  ASSERT_EQ(effective.size(), 10u * 3 + 10u * 2 + 20u * 1);
  std::set<int64_t> seen;
  for (const SampleLogEntry& e : effective) {
    ASSERT_EQ(e.world_size, e.step <= 10 ? 3 : e.step <= 20 ? 2 : 1) << "step " << e.step;
    for (int64_t id : e.ids) ASSERT_TRUE(seen.insert(id).second) << "sample " << id << " trained twice";
  }
  EXPECT_EQ(seen.size(), (10u * 3 + 10u * 2 + 20u * 1) * 64);
  const std::vector<std::pair<int, int>> counts = Resources(r.all());
  ASSERT_EQ(counts.size(), 3u) << r.all();
  for (size_t g = 1; g < counts.size(); ++g) {
    EXPECT_LE(counts[g].first, counts[g - 1].first) << "threads grew in generation " << g;
    EXPECT_LE(counts[g].second, counts[g - 1].second) << "open files grew in generation " << g;
  }
  EXPECT_FALSE(ShmSegmentsLeft(tag)) << "shared-memory segments " << tag << "* left in /dev/shm";
}

// A failure during the recovery itself: launch rank 2 dies in the backward pass of step 9, and launch rank
// 1 dies in the regroup, after the survivors decided on a generation with it. Launch rank 0 notices before
// that generation's rendezvous (not at its timeout), regroups alone and finishes.
TEST(ElasticTest, ARankLostDuringTheRegroupSendsTheOthersIntoTheNextOne) {
  std::vector<std::string> flags = Common("gloo");
  flags.insert(flags.end(), {"--elastic", "--max_steps=20", "--fault_inject_step=8", "--fault_inject_rank=2",
                             "--fault_inject_point=backward", "--fault_inject_more=1:regroup"});
  const ProcessResult r = RunJob(Job({"--elastic", "--nproc_per_node=3"}, flags));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("rank 1 kills itself in the elastic regroup"));
  EXPECT_THAT(r.all(), HasSubstr("lost before its group formed"));
  EXPECT_THAT(r.all(),
              HasSubstr("generation 2: launch rank 0 (completed steps 8) formed: rank 0 of 1 continues from "
                        "step 8"));
  EXPECT_THAT(r.all(), HasSubstr("ddprun: elastic: the job finished without the lost rank(s) 2, 1"));
}

// --zero keeps a lost rank's optimizer shard nowhere else: the survivors stop saying so, and ddprun's
// restart resumes every rank from the last checkpoint. Until the survivors have said so, ddprun may
// replace the lost slot once: that replacement refuses to join a --zero run and ends the elastic job, so
// no second one starts however slowly the survivors exit, and a budget of 2 (one replacement, one
// restart of the group) is enough.
TEST(ElasticTest, UnderZeroTheJobFallsBackToTheLastCheckpoint) {
  std::vector<std::string> flags = Common("gloo");
  flags.insert(flags.end(),
               {"--elastic", "--zero", "--max_steps=20", "--fault_inject_step=12", "--fault_inject_rank=2",
                "--checkpoint_every=10", "--resume", "--checkpoint_dir=" + TempPath("ck_elastic_zero")});
  const ProcessResult r = RunJob(Job({"--elastic", "--max_restarts=2", "--nproc_per_node=3"}, flags));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_LE(CountOccurrences(r.all(), "to rejoin the job"), 1) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("--zero keeps each rank's optimizer state only in that rank"));
  EXPECT_THAT(r.all(), HasSubstr("falling back to the last checkpoint"));
  EXPECT_THAT(r.all(), HasSubstr("restarting the worker group (restart"));
  EXPECT_THAT(r.all(), HasSubstr("step 10, epoch 1"));
}

// --elastic with a flag whose state is tied to the group is refused before anything runs, and without
// ddprun's elastic mode (which keeps the survivors running) it is refused naming it.
TEST(ElasticTest, WhatElasticCannotDoIsRefusedByName) {
  std::string output;
  EXPECT_EQ(RunShell(Runfile("train/train") + " --elastic --sync_bn --model=cnn_bn", &output), 2) << output;
  EXPECT_THAT(output, HasSubstr("--elastic rebuilds the group"));
  std::vector<std::string> flags = Common("gloo");
  flags.insert(flags.end(), {"--elastic", "--max_steps=1"});
  const ProcessResult r = RunJob(Job({"--nproc_per_node=2"}, flags));
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.all(),
              HasSubstr("--elastic needs a launcher that keeps the survivors running when a worker dies: "
                        "ddprun --elastic"));
}

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
