// A replacement rejoins an elastic job, end to end with real processes (Note [Elastic join] in
// comm/elastic_membership.cc): rank 2 of 3 is SIGKILLed after step 12, the two survivors continue, ddprun
// starts a replacement in rank 2's slot, and the group grows back to 3 after step 24. The final weights
// equal, bit for bit, those of runs that change the world size 3 -> 2 -> 3 at the same steps by
// checkpoint-and-restart, and the sample log's effective steps are theirs, sample for sample (no sample
// lost or repeated). Over Gloo and over shared memory (no segment left behind). A replacement nobody
// admits fails naming what it waited for; one with other data or settings is refused before it registers.
#include <gtest/gtest.h>

#include <unistd.h>

#include <map>
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
using ::testing::Not;

constexpr int64_t kLostAfter = 12;   // rank 2 dies after this step
constexpr int64_t kJoinAfter = 24;   // the replacement joins after this step
constexpr int64_t kSteps = 60;

// RunJob with a replacement's admission wait bounded at 60 s.
ProcessResult RunJobWithJoinTimeout(const std::vector<std::string>& argv, std::vector<std::string> env = {}) {
  env.insert(env.begin(), "DDP_ELASTIC_JOIN_TIMEOUT_S=60");
  return RunJob(argv, env);
}

int WorldAt(int64_t step) { return step <= kLostAfter ? 3 : step <= kJoinAfter ? 2 : 3; }

// Whether /dev/shm holds a segment whose name starts with `tag`.
bool ShmSegmentsLeft(const std::string& tag) {
  std::string listing;
  RunShell("ls /dev/shm", &listing);
  return listing.find(tag) != std::string::npos;
}

void ReplacementMatchesCheckpointRestarts(const std::string& backend) {
  SCOPED_TRACE(backend);
  const std::string tag = absl::StrCat("rejoin_", backend, "_", getpid());
  const std::string shm_tag = absl::StrCat("ddp-rejoin-test-", getpid(), "-", backend);
  std::vector<std::string> elastic = Common(backend);
  elastic.insert(elastic.end(), {"--elastic", absl::StrCat("--max_steps=", kSteps),
                                 absl::StrCat("--fault_inject_step=", kLostAfter), "--fault_inject_rank=2",
                                 "--fault_inject_point=after_step", absl::StrCat("--elastic_join_at_step=", kJoinAfter),
                                 "--log_samples=" + TempPath(tag + ".log"), "--save=" + TempPath(tag + ".safetensors")});
  const ProcessResult r = RunJobWithJoinTimeout(Job({"--elastic", "--max_restarts=1", "--nproc_per_node=3"}, elastic),
                                 {"DDP_SHM_NAME_TAG=" + shm_tag});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.all(), HasSubstr(absl::StrCat("rank 2 kills itself after step ", kLostAfter)));
  EXPECT_THAT(r.all(), HasSubstr("ddprun: elastic: starting member 3 in rank 2's slot to rejoin the job (restart 1 of 1)"));
  EXPECT_THAT(r.all(), HasSubstr("replacement member 3 (for rank 2) registered; waiting to be admitted"));
  EXPECT_THAT(r.all(), HasSubstr(absl::StrCat("admitting replacement(s) 3 after step ", kJoinAfter)));
  EXPECT_THAT(r.all(), HasSubstr(absl::StrCat("generation 2: launch ranks 0, 1, 3 (completed steps ", kJoinAfter, ", ",
                                              kJoinAfter, ", -1) formed: rank 0 of 3 continues from step ", kJoinAfter)));
  EXPECT_THAT(r.all(), HasSubstr(absl::StrCat("replacement member 3 joined generation 2: launch ranks 0, 1, 3")));
  EXPECT_THAT(r.all(), HasSubstr("as rank 2 of 3 at step 24"));
  EXPECT_FALSE(ShmSegmentsLeft(shm_tag)) << "shared-memory segments " << shm_tag << "* left in /dev/shm";

  // The same world sizes by checkpoint and restart: 3 ranks to step 12, 2 ranks to step 24, 3 ranks to the end.
  const std::string dir = TempPath("ck_" + tag);
  std::vector<std::string> first = Common(backend);
  first.insert(first.end(), {absl::StrCat("--max_steps=", kLostAfter), absl::StrCat("--checkpoint_every=", kLostAfter),
                             "--checkpoint_dir=" + dir, "--log_samples=" + TempPath(tag + "_1.log")});
  const ProcessResult one = RunJobWithJoinTimeout(Job({"--nproc_per_node=3"}, first));
  ASSERT_EQ(one.exit_code, 0) << one.all();
  std::vector<std::string> second = Common(backend);
  second.insert(second.end(), {absl::StrCat("--max_steps=", kJoinAfter), absl::StrCat("--checkpoint_every=", kJoinAfter - kLostAfter),
                               "--resume", "--checkpoint_dir=" + dir, "--log_samples=" + TempPath(tag + "_2.log")});
  const ProcessResult two = RunJobWithJoinTimeout(Job({"--nproc_per_node=2"}, second));
  ASSERT_EQ(two.exit_code, 0) << two.all();
  std::vector<std::string> third = Common(backend);
  third.insert(third.end(), {absl::StrCat("--max_steps=", kSteps), "--resume", "--checkpoint_dir=" + dir,
                             "--log_samples=" + TempPath(tag + "_3.log"), "--save=" + TempPath(tag + "_restarted.safetensors")});
  const ProcessResult three = RunJobWithJoinTimeout(Job({"--nproc_per_node=3"}, third));
  ASSERT_EQ(three.exit_code, 0) << three.all();
  EXPECT_THAT(three.all(), HasSubstr(absl::StrCat("step ", kJoinAfter, ", epoch 1")));

  const ProcessResult cmp = RunShell("cmp " + TempPath(tag + ".safetensors") + " " + TempPath(tag + "_restarted.safetensors"));
  EXPECT_EQ(cmp.exit_code, 0) << "the elastic run's weights differ from the checkpoint-and-restart runs'\n" << cmp.out;

  std::vector<SampleLogEntry> reference;
  for (const char* part : {"_1.log", "_2.log", "_3.log"}) {
    for (const SampleLogEntry& e : ReadLog(TempPath(tag + part))) reference.push_back(e);
  }
  reference = EffectiveSteps(reference);
  const std::vector<SampleLogEntry> effective = EffectiveSteps(ReadLog(TempPath(tag + ".log")));
  size_t entries = 0;
  for (int64_t step = 1; step <= kSteps; ++step) entries += WorldAt(step);
  ASSERT_EQ(effective.size(), entries);
  ASSERT_EQ(reference.size(), entries);
  std::set<int64_t> seen;
  for (size_t i = 0; i < effective.size(); ++i) {
    ASSERT_EQ(effective[i].step, reference[i].step);
    ASSERT_EQ(effective[i].rank, reference[i].rank);
    ASSERT_EQ(effective[i].world_size, WorldAt(effective[i].step)) << "step " << effective[i].step;
    ASSERT_EQ(effective[i].ids, reference[i].ids) << "step " << effective[i].step << " rank " << effective[i].rank;
    for (int64_t id : effective[i].ids) ASSERT_TRUE(seen.insert(id).second) << "sample " << id << " trained twice";
  }
  EXPECT_EQ(seen.size(), entries * 64);
}

TEST(ElasticRejoinTest, AReplacementOverGlooRejoinsAndMatchesCheckpointRestartsBitForBit) {
  ReplacementMatchesCheckpointRestarts("gloo");
}

TEST(ElasticRejoinTest, AReplacementOverShmRejoinsAndMatchesCheckpointRestartsBitForBit) {
  ReplacementMatchesCheckpointRestarts("shm");
}

// Without the test hold: the survivors notice the registered replacement through their own store polls,
// agree on it through the stop agreement's bit, and admit it at whatever step that is. No sample of the
// epoch is lost or trained twice: every step 1..150 has one entry per rank at its world size (3, then 2,
// then 3 again), and no sample appears twice. The cnn's steps are slow enough (about 10 s for the run)
// that the survivors are still training when the replacement has started (under a second here).
TEST(ElasticRejoinTest, AReplacementIsNoticedAtSomeStepBoundaryAndTheEpochLosesNoSample) {
  const std::string log = TempPath(absl::StrCat("rejoin_natural_", getpid(), ".log"));
  std::vector<std::string> flags = {"--model=cnn", "--epochs=1", "--lr_schedule=constant", "--backend=shm"};
  flags.insert(flags.end(), {"--elastic", "--max_steps=150", "--fault_inject_step=5", "--fault_inject_rank=2",
                             "--fault_inject_point=backward", "--log_samples=" + log});
  const ProcessResult r = RunJobWithJoinTimeout(Job({"--elastic", "--max_restarts=1", "--nproc_per_node=3"}, flags));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("replacement member 3 joined generation 2: launch ranks 0, 1, 3"));
  EXPECT_THAT(r.all(), HasSubstr("the first with the replacement(s) of generation 2"));
  const std::vector<SampleLogEntry> effective = EffectiveSteps(ReadLog(log));
  ASSERT_FALSE(effective.empty());
  std::set<int64_t> seen;
  std::map<int64_t, int> entries_of_step;
  int last_world = 0;
  std::vector<int> worlds;  // the world sizes in step order, without repeats
  size_t samples = 0;
  for (const SampleLogEntry& e : effective) {
    if (e.world_size != last_world) worlds.push_back(last_world = e.world_size);
    ++entries_of_step[e.step];
    ASSERT_EQ(entries_of_step[e.step], 1 + e.rank) << "step " << e.step << ": ranks out of order or missing";
    samples += e.ids.size();
    for (int64_t id : e.ids) ASSERT_TRUE(seen.insert(id).second) << "sample " << id << " trained twice";
  }
  EXPECT_EQ(worlds, (std::vector<int>{3, 2, 3}));
  ASSERT_EQ(entries_of_step.size(), 150u);
  EXPECT_EQ(entries_of_step.begin()->first, 1);
  for (const SampleLogEntry& e : effective) EXPECT_EQ(entries_of_step[e.step], e.world_size) << "step " << e.step;
  EXPECT_EQ(seen.size(), samples);
}

// The survivors' run with a replacement started by a wrapper that adds `replacement_flags` to the lost
// worker's command line when ddprun starts it as a replacement (DDP_ELASTIC_JOIN=1): the cnn's 400 steps
// (about 6 s here) leave the replacement time to start and be refused while they train.
ProcessResult RunWithReplacementFlags(const std::string& replacement_flags) {
  std::string train = Runfile("train/train");
  for (const char* flag : {"--model=cnn", "--epochs=1", "--lr_schedule=constant", "--backend=shm",
                           "--elastic", "--max_steps=400", "--fault_inject_step=5", "--fault_inject_rank=2",
                           "--fault_inject_point=backward"}) {
    absl::StrAppend(&train, " ", flag);
  }
  const std::string wrapper = absl::StrCat("if [ \"$DDP_ELASTIC_JOIN\" = 1 ]; then exec ", train, " ",
                                           replacement_flags, "; else exec ", train, "; fi");
  return RunJobWithJoinTimeout({Runfile("launch/ddprun"), "--master_port=0", "--elastic", "--max_restarts=1",
                                "--nproc_per_node=3", "/bin/sh", "-c", wrapper});
}

// Note [Replacement fit check]: a replacement whose node holds other data (here the test set with one label
// changed: the same sizes) or whose command line differs is refused before it registers, naming the
// difference, and the survivors finish the run at 2 ranks instead of ending with the mismatch.
TEST(ElasticRejoinTest, AReplacementWithOtherDataOrSettingsIsRefusedAndTheSurvivorsFinish) {
  const std::string fashion = "/usr/share/datasets/fashion-mnist";
  const std::string dir = TempPath(absl::StrCat("other_labels_", getpid()));
  ASSERT_EQ(RunShell(absl::StrCat(
                         "rm -rf ", dir, " && mkdir -p ", dir, " && cp ", fashion, "/*.gz ", dir, " && rm ",
                         dir, "/t10k-labels-idx1-ubyte.gz && zcat ", fashion,
                         "/t10k-labels-idx1-ubyte.gz | python3 -c 'import sys; b = bytearray(",
                         "sys.stdin.buffer.read()); b[8] = (b[8] + 1) % 10; sys.stdout.buffer.write(b)' > ",
                         dir, "/t10k-labels-idx1-ubyte"))
                .exit_code,
            0);
  const ProcessResult data = RunWithReplacementFlags("--data_dir=" + dir);
  EXPECT_EQ(data.exit_code, 0) << data.all();
  EXPECT_THAT(data.all(), HasSubstr("ddprun: elastic: starting member 3 in rank 2's slot"));
  EXPECT_THAT(data.all(), HasSubstr("this replacement cannot join the job: it loaded different data: the job "
                                    "(rank 0): " +
                                    fashion + " (60000 training, 10000 test images; data "));
  EXPECT_THAT(data.all(),
              HasSubstr("; this replacement: " + dir + " (60000 training, 10000 test images; data "));
  EXPECT_THAT(data.all(), Not(HasSubstr("registered; waiting to be admitted")));
  EXPECT_THAT(data.all(), Not(HasSubstr("joined generation")));

  const ProcessResult settings = RunWithReplacementFlags("--lr=0.5");
  EXPECT_EQ(settings.exit_code, 0) << settings.all();
  EXPECT_THAT(settings.all(), HasSubstr("this replacement cannot join the job: its --lr is 0.5, the job's "));
  EXPECT_THAT(settings.all(), Not(HasSubstr("joined generation")));
}

// A replacement that no running member admits (here: nobody runs; ddprun's environment makes the only
// worker a replacement) gives up after DDP_ELASTIC_JOIN_TIMEOUT_S, naming itself and the key it waited for.
TEST(ElasticRejoinTest, AReplacementNobodyAdmitsFailsNamingWhatItWaitedFor) {
  std::vector<std::string> flags = Common("gloo");
  flags.insert(flags.end(), {"--elastic", "--max_steps=5"});
  const ProcessResult r = RunJobWithJoinTimeout(Job({"--elastic", "--nproc_per_node=1"}, flags),
                                 {"DDP_ELASTIC_JOIN=1", "DDP_ELASTIC_MEMBER=1", "DDP_ELASTIC_JOIN_TIMEOUT_S=1"});
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("replacement member 1 (for rank 0) registered; waiting to be admitted"));
  EXPECT_THAT(r.all(), HasSubstr("elastic join: replacement member 1 was not admitted within 1s"));
  EXPECT_THAT(r.all(), HasSubstr("store key elastic/admitted/1"));
}

}  // namespace
}  // namespace ddp
