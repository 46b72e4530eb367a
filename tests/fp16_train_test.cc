// train/train --precision=fp16 end to end: dynamic loss scaling (nn/grad_scaler.h) skips the steps whose
// gradients overflow float16 and backs off; a run stopped at a checkpoint and resumed (the scaler's state
// comes from the checkpoint) ends with exactly the weights of an uninterrupted run; two DDP ranks skip
// the same steps (their replicas stay in sync); DataParallel's summed gradients are scaled and checked
// as one process's; what it cannot run is refused by name.
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/process.h"

namespace ddp {
namespace {

// An initial scale of 2^30 overflows float16 in the first backward passes: the scaler must back off
// several times before steps go through.
const char kCommon[] =
    " --model=mlp --lr_schedule=constant --epochs=1 --batch_size=256 --precision=fp16"
    " --grad_scaler_init_scale=1073741824 --grad_scaler_growth_interval=10";

// The number in "grad_scaler: N optimizer steps skipped" (-1 when absent).
int SkippedSteps(const std::string& output) {
  const std::string key = "grad_scaler: ";
  const size_t at = output.rfind(key);
  if (at == std::string::npos) return -1;
  return std::stoi(output.substr(at + key.size()));
}

TEST(Fp16TrainTest, SkipsOverflowedStepsAndResumesBitForBitWithTheScale) {
  const std::string whole = TempPath("fp16_whole.safetensors"), resumed = TempPath("fp16_resumed.safetensors");
  const std::string dir = TempPath("fp16_checkpoints");
  const std::string train = Runfile("train/train");
  std::string output, ignored;
  RunShell("rm -rf " + dir, &ignored);
  ASSERT_EQ(RunShell(train + kCommon + " --max_steps=40 --save=" + whole, &output), 0) << output;
  const int skipped = SkippedSteps(output);
  EXPECT_GE(skipped, 3) << "2^30 should overflow float16 for a few steps: " << output;
  EXPECT_LT(skipped, 20) << output;
  output.clear();
  ASSERT_EQ(RunShell(train + kCommon + " --max_steps=20 --checkpoint_every=20 --checkpoint_dir=" + dir, &output), 0)
      << output;
  std::string grep;
  EXPECT_EQ(RunShell("grep -rl grad_scaler " + dir, &grep), 0) << "the checkpoint keeps the scaler's state";
  output.clear();
  ASSERT_EQ(RunShell(train + kCommon + " --max_steps=40 --resume --checkpoint_dir=" + dir + " --save=" + resumed,
                     &output),
            0)
      << output;
  EXPECT_NE(output.find("resuming from"), std::string::npos) << output;
  // A resume that started again at 2^30 would skip steps the uninterrupted run took.
  std::string diff;
  EXPECT_EQ(RunShell("cmp " + whole + " " + resumed, &diff), 0) << diff;
}

TEST(Fp16TrainTest, TwoRanksSkipTheSameSteps) {
  std::string output;
  const std::string command =
      absl::StrCat("timeout 120 ", Runfile("launch/ddprun"), " --nproc_per_node=2 --master_port=0 ",
                   Runfile("train/train"), kCommon, " --max_steps=12 --check_sync_every=1");
  ASSERT_EQ(RunShell(command, &output), 0) << output;
  EXPECT_GE(SkippedSteps(output), 3) << output;
}

// Under --mode=dp the scaler runs over the gradients DataParallel summed, in one process.
TEST(Fp16TrainTest, DataParallelSkipsOverflowedSteps) {
  std::string output;
  ASSERT_EQ(RunShell(Runfile("train/train") + kCommon + " --max_steps=12 --mode=dp --dp_devices=2", &output),
            0)
      << output;
  EXPECT_GE(SkippedSteps(output), 3) << output;
  EXPECT_LT(SkippedSteps(output), 12) << output;
}

TEST(Fp16TrainTest, RefusesWhatItCannotRun) {
  const std::string train = Runfile("train/train");
  std::string output;
  EXPECT_EQ(RunShell(train + " --precision=fp16 --zero", &output), 2);
  EXPECT_NE(output.find("cannot be combined with --zero"), std::string::npos) << output;
  output.clear();
  EXPECT_EQ(RunShell(train + " --precision=fp16 --grad_scaler_growth_factor=1", &output), 2);
  EXPECT_NE(output.find("--grad_scaler_growth_factor"), std::string::npos) << output;
}

}  // namespace
}  // namespace ddp
