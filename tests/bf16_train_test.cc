// train/train --precision=bf16 end to end: it trains (the loss falls) with weights that differ from a
// float32 run (autocast took effect), a run stopped at a checkpoint and resumed ends with exactly the
// weights of an uninterrupted bf16 run (on the kernel the checkpoint recorded, when resumed without it
// pinned), and an unknown precision is refused by name.
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tensor/cpu_gemm_bf16.h"
#include "testing/process.h"

namespace ddp {
namespace {

const char kCommon[] = " --model=mlp --lr_schedule=constant --epochs=1 --batch_size=256 --precision=bf16";

TEST(Bf16TrainTest, ResumesBitForBitAndDiffersFromFloat32) {
  const std::string whole = TempPath("bf16_whole.safetensors"), resumed = TempPath("bf16_resumed.safetensors");
  const std::string fp32 = TempPath("fp32_whole.safetensors"), dir = TempPath("bf16_checkpoints");
  const std::string train = Runfile("train/train");
  std::string output;
  ASSERT_EQ(RunShell(train + kCommon + " --max_steps=60 --save=" + whole, &output), 0) << output;
  EXPECT_NE(output.find("bf16 GEMMs:"), std::string::npos) << "the kernel is named once: " << output;
  output.clear();
  ASSERT_EQ(RunShell(train + kCommon + " --max_steps=30 --checkpoint_every=30 --checkpoint_dir=" + dir, &output), 0)
      << output;
  output.clear();
  ASSERT_EQ(RunShell(train + kCommon + " --max_steps=60 --resume --checkpoint_dir=" + dir + " --save=" + resumed,
                     &output),
            0)
      << output;
  EXPECT_NE(output.find("resuming from"), std::string::npos) << output;
  std::string diff;
  EXPECT_EQ(RunShell("cmp " + whole + " " + resumed, &diff), 0) << diff;
  output.clear();
  ASSERT_EQ(RunShell(absl::StrCat(train, " --model=mlp --lr_schedule=constant --epochs=1 --batch_size=256 "
                                         "--max_steps=60 --precision=fp32 --save=", fp32),
                     &output),
            0)
      << output;
  EXPECT_EQ(output.find("bf16 GEMMs:"), std::string::npos) << output;
  EXPECT_NE(RunShell("cmp -s " + whole + " " + fp32, &diff), 0) << "bf16 and float32 runs gave the same weights";
}

// The checkpoint records the bf16 kernel its steps ran (Note [Autocast record]): a run trained with
// DDP_BF16_GEMM=fp32 and resumed without it keeps that kernel on this CPU and ends with exactly the
// weights of an uninterrupted DDP_BF16_GEMM=fp32 run, whichever kernel this CPU would choose by itself;
// a resume pinned to the other kernel says that it is not bit for bit.
TEST(Bf16TrainTest, ResumeKeepsTheKernelTheCheckpointRecorded) {
  const std::string whole = TempPath("bf16_fp32_kernel_whole.safetensors");
  const std::string resumed = TempPath("bf16_fp32_kernel_resumed.safetensors");
  const std::string dir = TempPath("bf16_fp32_kernel_checkpoints");
  const std::string train = Runfile("train/train");
  std::string output;
  ASSERT_EQ(RunShell("DDP_BF16_GEMM=fp32 " + train + kCommon + " --max_steps=60 --save=" + whole, &output), 0)
      << output;
  output.clear();
  const std::string first_half = " --max_steps=30 --checkpoint_every=30 --checkpoint_dir=" + dir;
  ASSERT_EQ(RunShell("DDP_BF16_GEMM=fp32 " + train + kCommon + first_half, &output), 0)
      << output;
  output.clear();
  ASSERT_EQ(RunShell("env -u DDP_BF16_GEMM " + train + kCommon +
                         " --max_steps=60 --resume --checkpoint_dir=" + dir + " --save=" + resumed,
                     &output),
            0)
      << output;
  EXPECT_NE(output.find("--resume: bf16 GEMMs on kernel \"fp32\""), std::string::npos) << output;
  EXPECT_NE(output.find("kept without choosing again"), std::string::npos) << output;
  std::string diff;
  EXPECT_EQ(RunShell("cmp " + whole + " " + resumed, &diff), 0) << diff;
  output.clear();
  const int pinned =
      RunShell("DDP_BF16_GEMM=onednn " + train + kCommon + " --max_steps=31 --resume --checkpoint_dir=" + dir,
               &output);
  if (!cpu::OneDnnBf16MatmulAvailable()) {
    // Where oneDNN has no bf16 matmul the pin is refused by name, not by an error from inside oneDNN.
    EXPECT_NE(pinned, 0) << output;
    EXPECT_NE(output.find("DDP_BF16_GEMM=onednn: oneDNN has no bf16 matmul on this CPU"), std::string::npos)
        << output;
    return;
  }
  ASSERT_EQ(pinned, 0) << output;
  EXPECT_NE(output.find("DDP_BF16_GEMM pins kernel \"onednn\" (oneDNN's bf16 matmul): the run continues, not "
                        "bit for bit"),
            std::string::npos)
      << output;
}

TEST(Bf16TrainTest, RefusesWhatItCannotRun) {
  const std::string train = Runfile("train/train");
  std::string output;
  EXPECT_EQ(RunShell(train + " --precision=fp64", &output), 2);
  EXPECT_NE(output.find("--precision"), std::string::npos) << output;
}

}  // namespace
}  // namespace ddp
