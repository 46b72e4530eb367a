// The DDP contract under misuse, end to end: train/train under ddprun (or ranks started by hand)
// with the mistakes users make in their second week must end in a clear error or a correct run, never
// a hang, a crash or silently wrong numbers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "absl/time/clock.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "testing/process.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Ddprun(int nproc) {
  return absl::StrCat(Runfile("launch/ddprun"), " --nproc_per_node=", nproc, " --master_port=0 ",
                      Runfile("train/train"));
}

// ddprun running train with per-rank flags, as ranks started by hand would: `rank0_flags` on rank 0,
// `other_flags` on the others (a shell reads RANK, which ddprun sets).
std::string DdprunPerRank(int nproc, const std::string& common, const std::string& rank0_flags,
                          const std::string& other_flags) {
  return absl::StrCat(Runfile("launch/ddprun"), " --nproc_per_node=", nproc, " --master_port=0 /bin/sh -c '",
                      "if [ \"$RANK\" = 0 ]; then f=\"", rank0_flags, "\"; else f=\"", other_flags, "\"; fi; exec ",
                      Runfile("train/train"), " ", common, " $f'");
}

std::string TempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  std::string ignored;
  RunShell(absl::StrCat("rm -rf ", dir, " && mkdir -p ", dir), &ignored);
  return dir;
}

// BatchNorm's running statistics differ between forwards under broadcast_buffers (each rank updates
// them from its own batch after the broadcast); the desync check must not call that a desync.
TEST(DdpContractTest, DesyncCheckAcceptsBatchNormStatistics) {
  std::string output;
  EXPECT_EQ(RunShell(Ddprun(2) + " --model=cnn_bn --max_steps=2 --batch_size=16 --check_sync_every=1", &output),
            0)
      << output;
  EXPECT_THAT(output, Not(HasSubstr("out of sync")));
  EXPECT_THAT(output, HasSubstr("final test_acc"));
}

// Ranks started with different bucket caps must not crash inside Gloo (exit 134) or reduce buffers of
// different sizes against each other: the start-up settings check names the flag and both values (DDP's
// own wrap-time check, which names its option, is the library's: ddp/distributed_data_parallel_test.cc).
TEST(DdpContractTest, MismatchedBucketCapsAreNamedAtStartUp) {
  std::string output;
  EXPECT_NE(RunShell(DdprunPerRank(2, "--model=mlp --max_steps=3", "--bucket_cap_mb=25", "--bucket_cap_mb=0"),
                     &output),
            0);
  EXPECT_THAT(
      output,
      HasSubstr("train/train settings differ across ranks: --bucket_cap_mb is 25 on rank 0 and 0 on rank 1"));
  EXPECT_THAT(output, Not(HasSubstr("terminate")));
}

// Different batch sizes must not run until the epoch ends and then crash: the first epoch names the flag.
TEST(DdpContractTest, MismatchedBatchSizesAreNamedBeforeTraining) {
  std::string output;
  EXPECT_NE(RunShell(DdprunPerRank(2, "--model=mlp --max_steps=3", "--batch_size=64", "--batch_size=48"), &output),
            0);
  EXPECT_THAT(output, HasSubstr("train/train settings differ across ranks: --batch_size is 64 on rank 0 and 48 on rank 1"));
}

// Uneven inputs under Join (the default): rank r runs r*2 fewer steps; every rank finishes, and each ran
// exactly its share (the sample log has one line per step and rank).
TEST(DdpContractTest, UnevenInputsJoinAndFinish) {
  const std::string dir = TempDir("uneven");
  std::string output;
  ASSERT_EQ(RunShell(absl::StrCat(Ddprun(3), " --model=mlp --max_steps=6 --uneven_drop_batches=2 --shuffle=false ",
                                  "--lr_schedule=constant --log_samples=", dir, "/log --save=", dir, "/w"),
                     &output),
            0)
      << output;
  for (int rank = 0; rank < 3; ++rank) {
    std::string lines;
    ASSERT_EQ(RunShell(absl::StrCat("grep -c ' rank=", rank, " ' ", dir, "/log"), &lines), 0) << rank;
    EXPECT_EQ(std::stoi(lines), 6 - 2 * rank) << "rank " << rank;
  }
  EXPECT_THAT(output, HasSubstr("final test_acc"));
}

// Without Join, uneven inputs would leave the others waiting: every rank fails at once naming the step
// counts of each rank.
TEST(DdpContractTest, UnevenInputsWithoutJoinFailNamingTheShortRank) {
  std::string output;
  const absl::Time start = absl::Now();
  EXPECT_NE(RunShell(Ddprun(2) + " --model=mlp --max_steps=6 --uneven_drop_batches=2 --join=false", &output), 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  EXPECT_THAT(output, HasSubstr("training steps this epoch (uneven inputs need --join) is 6 on rank 0 and 4 on rank 1"));
}

// Preemption: SIGTERM to ddprun mid-epoch; the ranks agree on the stop step, save it, exit 143; a resumed
// run ends bit-identical to an undisturbed one.
TEST(DdpContractTest, SigtermSavesTheAgreedStepAndResumesBitExactly) {
  const std::string dir = TempDir("preempt");
  const std::string train = absl::StrCat(Ddprun(2), " --model=mlp --max_steps=300 --epochs=1 --checkpoint_dir=", dir,
                                         "/ck");
  std::string output;
  const int code = RunShell(
      absl::StrCat("(", train, " --log_samples=", dir, "/log --save=", dir, "/stopped) 2>&1 & pid=$!; ",
                   "for i in $(seq 1 3000); do [ \"$(cat ", dir, "/log 2>/dev/null | wc -l)\" -ge 40 ] && break; ",
                   "sleep 0.01; done; kill -TERM $pid; wait $pid; echo \"ddprun exit $?\""),
      &output);
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("ddprun exit 143"));
  EXPECT_THAT(output, HasSubstr("[rank 0] "));
  // Both ranks name the same step.
  const size_t at = output.find("stopped by SIGTERM after step ");
  ASSERT_NE(at, std::string::npos) << output;
  const std::string step = output.substr(at + 30, output.find(' ', at + 30) - at - 30);
  EXPECT_LT(std::stoi(step), 300);
  EXPECT_THAT(output, HasSubstr(absl::StrCat("stopped by SIGTERM after step ", step, " (every rank)")));
  std::string resumed, whole;
  ASSERT_EQ(RunShell(absl::StrCat(train, " --resume --save=", dir, "/resumed"), &resumed), 0) << resumed;
  ASSERT_EQ(RunShell(absl::StrCat(Ddprun(2), " --model=mlp --max_steps=300 --epochs=1 --save=", dir, "/whole"), &whole),
            0)
      << whole;
  std::string diff;
  EXPECT_EQ(RunShell(absl::StrCat("cmp ", dir, "/whole ", dir, "/resumed"), &diff), 0) << diff;
}

// A single-process run ignores the DDP-only flags: it says so once, naming them; plain flags say nothing.
TEST(DdpContractTest, SingleProcessWarnsOnceAboutDdpOnlyFlags) {
  const std::string dir = TempDir("single");
  std::string output;
  ASSERT_EQ(RunShell(absl::StrCat(Runfile("train/train"), " --model=mlp --max_steps=1 --bucket_cap_mb=5 ",
                                  "--comm_hook=fp16 --trace_out=", dir, "/trace.json"),
                     &output),
            0)
      << output;
  EXPECT_THAT(output, HasSubstr("train: warning: --bucket_cap_mb, --comm_hook, --trace_out take effect only "
                                "under DDP (WORLD_SIZE > 1, e.g. under ddprun); ignored in this single-process run"));
  EXPECT_EQ(output.find("warning"), output.rfind("warning"));  // once
  std::string plain;
  ASSERT_EQ(RunShell(absl::StrCat(Runfile("train/train"), " --model=mlp --max_steps=1"), &plain), 0) << plain;
  EXPECT_THAT(plain, Not(HasSubstr("warning")));
}

}  // namespace
}  // namespace ddp
