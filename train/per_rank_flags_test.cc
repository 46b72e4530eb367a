// What must agree across ranks is checked, not assumed: train/train under ddprun with flags that a
// wrapper script gives to rank 1 only (as ranks started by hand, or a launcher script with a bug,
// would). Each case ends at once, on every rank, with an error naming what differs and on which rank,
// instead of a hang until DDP_TIMEOUT_S, an abort, or a wrong number reported as a success.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "testing/process.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Short runs of the mlp (a few steps at batch 256) and of the cnn with BatchNorm.
const char kMlp[] = "--model=mlp --epochs=1 --batch_size=256 --lr_schedule=constant";
// The collective timeout the ranks get: well above every run here, so an error that comes in time was
// not a timeout.
const char kTimeout[] = "DDP_TIMEOUT_S=40";
const absl::Duration kPromptly = absl::Seconds(25);

std::string Train() { return Runfile("train/train"); }

// A fresh, empty directory under the test's scratch space.
std::string FreshDir(const std::string& name) {
  const std::string dir = TempPath(name);
  std::string ignored;
  EXPECT_EQ(RunShell("rm -rf " + dir + " && mkdir -p " + dir, &ignored), 0) << ignored;
  return dir;
}

// ddprun with 2 ranks running train with `common` flags, plus `rank1_flags` on rank 1 only: a wrapper
// shell reads RANK (which ddprun sets). `rank1_flags` may use $RANK.
ProcessResult RunWithRank1Flags(const std::string& common, const std::string& rank1_flags) {
  const std::string wrapper = absl::StrCat("if [ \"$RANK\" = 1 ]; then extra=\"", rank1_flags,
                                           "\"; else extra=; fi; exec ", Train(), " ", common, " $extra");
  return RunShell(absl::StrCat(kTimeout, " ", Runfile("launch/ddprun"),
                               " --nproc_per_node=2 --master_port=0 ", "/bin/sh -c '", wrapper, "'"),
                  absl::Seconds(120));
}

// The run failed promptly (not at the collective timeout) with `message` in its output.
void ExpectNamedPromptly(const ProcessResult& run, const std::string& message) {
  EXPECT_NE(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr(message));
  EXPECT_LT(run.elapsed, kPromptly) << run.out;
  EXPECT_THAT(run.out, Not(HasSubstr("Aborted")));
  EXPECT_THAT(run.out, Not(HasSubstr("signal 6")));
}

// --sync_bn on one rank only adds SyncBatchNorm's all-reduces to that rank's forward: the others would
// meet them with DDP's collectives (an abort inside the backend, or a hang).
TEST(PerRankFlagsTest, SyncBnOnOneRankIsNamed) {
  const ProcessResult run = RunWithRank1Flags("--model=cnn_bn --max_steps=2 --batch_size=16", "--sync_bn");
  ExpectNamedPromptly(
      run, "train/train settings differ across ranks: --sync_bn is false on rank 0 and true on rank 1");
}

// --zero on one rank only registers ZeRO's comm hook and all-gathers parameters that the other rank never
// sends.
TEST(PerRankFlagsTest, ZeroOnOneRankIsNamed) {
  const ProcessResult run = RunWithRank1Flags(absl::StrCat(kMlp, " --max_steps=2"), "--zero");
  ExpectNamedPromptly(
      run, "train/train settings differ across ranks: --zero is false on rank 0 and true on rank 1");
}

// An output flag given to rank 1 only would never be written (rank 0 writes every output); it is named,
// and nothing is trained or written.
TEST(PerRankFlagsTest, AnOutputFlagOnOneRankIsNamed) {
  const std::string dir = FreshDir("output_on_one_rank");
  const ProcessResult run = RunWithRank1Flags(absl::StrCat(kMlp, " --max_steps=2"), "--save=" + dir + "/w");
  ExpectNamedPromptly(
      run, "train/train settings differ across ranks: --save is not given on rank 0 and given on rank 1");
  std::string listing;
  EXPECT_EQ(RunShell("ls -A " + dir, &listing), 0);
  EXPECT_EQ(listing, "");
}

// --eval_only where rank 1 loaded another file (a stale copy on its node): every rank evaluates its share
// with its own weights, and the blend would be reported as the accuracy. The weights are compared first
// and each rank's file is named.
TEST(PerRankFlagsTest, EvalOnlyWithDifferentWeightsIsNamed) {
  const std::string dir = FreshDir("eval_weights");
  std::string output;
  ASSERT_EQ(RunShell(absl::StrCat(Train(), " ", kMlp, " --max_steps=1 --save=", dir, "/w1"), &output), 0)
      << output;
  ASSERT_EQ(RunShell(absl::StrCat(Train(), " ", kMlp, " --max_steps=2 --save=", dir, "/w2"), &output), 0)
      << output;
  ASSERT_EQ(RunShell(absl::StrCat("cp ", dir, "/w1 ", dir, "/w1_copy"), &output), 0) << output;
  // The same bytes under another path on rank 1 evaluate as before.
  const ProcessResult same = RunWithRank1Flags(
      absl::StrCat("--model=mlp --eval_only --init_from=", dir, "/w1"), "--init_from=" + dir + "/w1_copy");
  EXPECT_EQ(same.exit_code, 0) << same.out;
  EXPECT_THAT(same.out, HasSubstr("final test_acc"));
  const ProcessResult run = RunWithRank1Flags(
      absl::StrCat("--model=mlp --eval_only --init_from=", dir, "/w1"), "--init_from=" + dir + "/w2");
  ExpectNamedPromptly(
      run, absl::StrCat("--eval_only: the ranks loaded different weights: rank 0: --init_from=", dir,
                        "/w1 (state "));
  EXPECT_THAT(run.out, HasSubstr(absl::StrCat("; rank 1: --init_from=", dir, "/w2 (state ")));
  EXPECT_THAT(run.out, Not(HasSubstr("final test_acc")));
}

// Each node reads its own copy of the data (--data_dir may differ per rank): a copy of the same bytes
// trains as before, and a copy that lost its last training record is named with each rank's folder,
// before any step.
TEST(PerRankFlagsTest, DifferentDataOnOneRankIsNamed) {
  const std::string dir = FreshDir("data_copies");
  const std::string fashion = "/usr/share/datasets/fashion-mnist";
  std::string output;
  ASSERT_EQ(RunShell(absl::StrCat(
                         "mkdir -p ", dir, "/same ", dir, "/short && cp ", fashion, "/*.gz ", dir,
                         "/same/ && cp ", fashion, "/t10k* ", dir, "/short/ && cd ", dir, "/short && ",
                         "zcat ", fashion, "/train-images-idx3-ubyte.gz | head -c $((16 + 59999 * 784)) | ",
                         "python3 -c 'import sys; b = sys.stdin.buffer.read(); ",
                         "sys.stdout.buffer.write(b[:4] + (59999).to_bytes(4, \"big\") + b[8:])' ",
                         "> train-images-idx3-ubyte && zcat ", fashion, "/train-labels-idx1-ubyte.gz | ",
                         "head -c $((8 + 59999)) | python3 -c 'import sys; b = sys.stdin.buffer.read(); ",
                         "sys.stdout.buffer.write(b[:4] + (59999).to_bytes(4, \"big\") + b[8:])' ",
                         "> train-labels-idx1-ubyte"),
                     &output),
            0)
      << output;
  const ProcessResult same =
      RunWithRank1Flags(absl::StrCat(kMlp, " --max_steps=2"), "--data_dir=" + dir + "/same");
  EXPECT_EQ(same.exit_code, 0) << same.out;
  const ProcessResult run =
      RunWithRank1Flags(absl::StrCat(kMlp, " --max_steps=2"), "--data_dir=" + dir + "/short");
  ExpectNamedPromptly(run, "the ranks loaded different data: rank 0: " + fashion +
                               " (60000 training, 10000 test images; data ");
  EXPECT_THAT(run.out, HasSubstr("; rank 1: " + dir + "/short (59999 training, 10000 test images; data "));
  EXPECT_THAT(run.out, Not(HasSubstr("epoch 1")));
}

// --resume where rank 1's checkpoint directory saw one step fewer (a copy made too early): the ranks
// would train on from different weights (nothing re-broadcasts them after a resume) and different
// sampler positions. Each rank's resume point is named; so is a rank that finds no checkpoint at all.
TEST(PerRankFlagsTest, ResumeFromDifferentStepsIsNamed) {
  const std::string dir = FreshDir("resume_points");
  const std::string run_flags = absl::StrCat(kMlp, " --checkpoint_every=1");
  std::string output;
  ASSERT_EQ(RunShell(absl::StrCat(Train(), " ", run_flags, " --max_steps=2 --checkpoint_dir=", dir, "/ck0"),
                     &output),
            0)
      << output;
  ASSERT_EQ(
      RunShell(absl::StrCat("cp -r ", dir, "/ck0 ", dir, "/ck1 && rm -r ", dir,
                            "/ck1/step-2 && echo step-1 > ", dir, "/ck1/latest && mkdir ", dir, "/empty"),
               &output),
      0)
      << output;
  const std::string common =
      absl::StrCat(run_flags, " --max_steps=4 --resume --checkpoint_dir=", dir, "/ck0");
  ProcessResult run = RunWithRank1Flags(common, absl::StrCat("--checkpoint_dir=", dir, "/ck1"));
  ExpectNamedPromptly(run,
                      absl::StrCat("--resume: the ranks would continue from different points: rank 0: step 2 "
                                   "(epoch 1, 512 samples of it) from ",
                                   dir, "/ck0/step-2 (state "));
  EXPECT_THAT(run.out, HasSubstr(absl::StrCat("; rank 1: step 1 (epoch 1, 256 samples of it) from ", dir,
                                              "/ck1/step-1 (state ")));
  run = RunWithRank1Flags(common, absl::StrCat("--checkpoint_dir=", dir, "/empty"));
  ExpectNamedPromptly(run, absl::StrCat("; rank 1: no checkpoint in ", dir, "/empty, a fresh start"));
  EXPECT_THAT(run.out, Not(HasSubstr("final test_acc")));
}

}  // namespace
}  // namespace ddp
