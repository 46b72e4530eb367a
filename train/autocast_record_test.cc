// The "autocast" checkpoint record: its JSON form, the errors that name a malformed field, and what
// --resume decides from it (keep the recorded bf16 kernel, or say that the run is not bit for bit).
#include "train/autocast_record.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

using cpu::Bf16GemmKernel;

const char kCpu[] = "AuthenticAMD family 26 model 2 (AMD EPYC), bf16: avx512_bf16";
const char kOtherCpu[] = "GenuineIntel family 6 model 207 (Intel(R) Xeon(R) Processor), bf16: avx512_bf16";

TrainConfig Config(const std::string& precision, const std::string& device = "cpu") {
  TrainConfig config;
  config.precision = precision;
  config.device = device;
  return config;
}

AutocastRecord Bf16Record(const std::string& kernel, const std::string& cpu = kCpu) {
  return AutocastRecord{"bf16", "cpu", kernel, cpu};
}

TEST(AutocastRecordTest, RoundTripsThroughJson) {
  for (const AutocastRecord& record :
       {Bf16Record("onednn"), Bf16Record("fp32", kOtherCpu), AutocastRecord{"fp16", "cpu", "", kCpu},
        AutocastRecord{"bf16", "cuda", "", kCpu},
        AutocastRecord{"bf16", "cpu", "onednn", kCpu, "channels_last"},
        AutocastRecord{"fp32", "cpu", "", kCpu, "contiguous"}}) {
    const std::string text = EncodeAutocastRecord(record);
    absl::StatusOr<AutocastRecord> decoded = DecodeAutocastRecord(text, "d/manifest.json");
    ASSERT_TRUE(decoded.ok()) << decoded.status() << " for " << text;
    EXPECT_EQ(decoded->precision, record.precision);
    EXPECT_EQ(decoded->device, record.device);
    EXPECT_EQ(decoded->bf16_gemm_kernel, record.bf16_gemm_kernel);
    EXPECT_EQ(decoded->cpu, record.cpu);
    EXPECT_EQ(decoded->memory_format, record.memory_format);
    EXPECT_EQ(text.find("memory_format") != std::string::npos, !record.memory_format.empty()) << text;
  }
}

TEST(AutocastRecordTest, AMalformedRecordNamesTheFileAndTheField) {
  const struct {
    const char* text;
    const char* expected;
  } cases[] = {
      {"[1]", "\"autocast\" must be an object"},
      {"{not json", "\"autocast\" must be an object, got {not json"},
      {R"({"device":"cpu","bf16_gemm_kernel":"","cpu":"x"})", "\"autocast.precision\" is missing"},
      {R"({"precision":"fp64","device":"cpu","bf16_gemm_kernel":"","cpu":"x"})",
       "\"autocast.precision\" must be one of \"fp32\", \"bf16\", \"fp16\", got \"fp64\""},
      {R"({"precision":"fp32","device":"tpu","bf16_gemm_kernel":"","cpu":"x"})",
       "\"autocast.device\" must be one of"},
      {R"({"precision":"bf16","device":"cpu","bf16_gemm_kernel":"","cpu":"x"})",
       "\"autocast.bf16_gemm_kernel\" must be one of \"onednn\", \"fp32\", got \"\""},
      {R"({"precision":"fp32","device":"cpu","bf16_gemm_kernel":"onednn","cpu":"x"})",
       "\"autocast.bf16_gemm_kernel\" must be one of \"\", got \"onednn\""},
      {R"({"precision":"fp32","device":"cpu","bf16_gemm_kernel":"","cpu":7})",
       "\"autocast.cpu\" must be a string, got 7"},
      {R"({"precision":"fp32","device":"cpu","bf16_gemm_kernel":"","cpu":"x","memory_format":"nhwc"})",
       "\"autocast.memory_format\" must be one of \"contiguous\", \"channels_last\", got \"nhwc\""},
  };
  for (const auto& c : cases) {
    const absl::StatusOr<AutocastRecord> decoded = DecodeAutocastRecord(c.text, "run/step-3/manifest.json");
    ASSERT_FALSE(decoded.ok()) << c.text;
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_TRUE(absl::StrContains(decoded.status().message(), "checkpoint file run/step-3/manifest.json: "))
        << decoded.status();
    EXPECT_TRUE(absl::StrContains(decoded.status().message(), c.expected))
        << decoded.status() << " for " << c.text;
  }
}

TEST(AutocastRecordTest, SameCpuWithoutAPinKeepsTheRecordedKernel) {
  for (const char* kernel : {"onednn", "fp32"}) {
    const AutocastResumePlan plan =
        PlanAutocastResume(Bf16Record(kernel), "ck/step-30", Config("bf16"), kCpu, Bf16GemmKernel::kAuto);
    ASSERT_TRUE(plan.keep_kernel.has_value()) << kernel;
    EXPECT_STREQ(cpu::Bf16GemmKernelName(*plan.keep_kernel), kernel);
    EXPECT_FALSE(plan.compare_kernel_after_choosing);
    ASSERT_EQ(plan.notes.size(), 1u);
    EXPECT_TRUE(absl::StrContains(plan.notes[0], "kept without choosing again")) << plan.notes[0];
    EXPECT_TRUE(absl::StrContains(plan.notes[0], "ck/step-30")) << plan.notes[0];
  }
}

TEST(AutocastRecordTest, APinnedKernelWinsAndIsNamedWhenItDiffers) {
  AutocastResumePlan plan =
      PlanAutocastResume(Bf16Record("fp32"), "ck/step-30", Config("bf16"), kCpu, Bf16GemmKernel::kOneDnn);
  EXPECT_FALSE(plan.keep_kernel.has_value());
  EXPECT_FALSE(plan.compare_kernel_after_choosing);
  ASSERT_EQ(plan.notes.size(), 1u);
  EXPECT_TRUE(absl::StrContains(plan.notes[0], "kernel \"fp32\" (float32 GEMMs of the rounded operands)"))
      << plan.notes[0];
  EXPECT_TRUE(absl::StrContains(plan.notes[0], "DDP_BF16_GEMM pins kernel \"onednn\"")) << plan.notes[0];
  EXPECT_TRUE(absl::StrContains(plan.notes[0], "not bit for bit")) << plan.notes[0];

  plan =
      PlanAutocastResume(Bf16Record("onednn"), "ck/step-30", Config("bf16"), kCpu, Bf16GemmKernel::kOneDnn);
  EXPECT_FALSE(plan.keep_kernel.has_value());
  EXPECT_TRUE(plan.notes.empty()) << plan.notes[0];
}

TEST(AutocastRecordTest, AnotherCpuChoosesAgainAndSaysWhenTheKernelDiffers) {
  const AutocastResumePlan plan = PlanAutocastResume(Bf16Record("onednn", kOtherCpu), "ck/step-30",
                                                     Config("bf16"), kCpu, Bf16GemmKernel::kAuto);
  EXPECT_FALSE(plan.keep_kernel.has_value());
  EXPECT_TRUE(plan.compare_kernel_after_choosing);
  EXPECT_TRUE(plan.notes.empty());
  EXPECT_EQ(
      ResumeNoteForChosenKernel(Bf16Record("onednn", kOtherCpu), "ck/step-30", Bf16GemmKernel::kOneDnn, kCpu),
      "");
  const std::string note = ResumeNoteForChosenKernel(Bf16Record("onednn", kOtherCpu), "ck/step-30",
                                                     Bf16GemmKernel::kFloat32, kCpu);
  EXPECT_TRUE(absl::StrContains(note, kOtherCpu)) << note;
  EXPECT_TRUE(absl::StrContains(note, std::string("this CPU (") + kCpu + ") runs kernel \"fp32\"")) << note;
  EXPECT_TRUE(absl::StrContains(note, "not bit for bit")) << note;
}

TEST(AutocastRecordTest, AnotherPrecisionOrDeviceIsNamedAndNothingIsKept) {
  const struct {
    AutocastRecord saved;
    TrainConfig now;
    const char* expected;
  } cases[] = {
      {Bf16Record("onednn"), Config("fp32"), "ran --precision=bf16 on cpu, this run --precision=fp32 on cpu"},
      {AutocastRecord{"fp16", "cpu", "", kCpu}, Config("bf16"),
       "ran --precision=fp16 on cpu, this run --precision=bf16"},
      {AutocastRecord{"bf16", "cuda", "", kCpu}, Config("bf16"),
       "ran --precision=bf16 on cuda, this run --precision=bf16 on cpu"},
  };
  for (const auto& c : cases) {
    const AutocastResumePlan plan =
        PlanAutocastResume(c.saved, "ck/step-9", c.now, kCpu, Bf16GemmKernel::kAuto);
    EXPECT_FALSE(plan.keep_kernel.has_value()) << c.expected;
    EXPECT_FALSE(plan.compare_kernel_after_choosing) << c.expected;
    ASSERT_EQ(plan.notes.size(), 1u) << c.expected;
    EXPECT_TRUE(absl::StrContains(plan.notes[0], c.expected)) << plan.notes[0];
  }
}

// The activations' layout: a record of another layout is named (whatever else the plan says), one of the
// same layout or without the field (written before it existed) says nothing of it.
TEST(AutocastRecordTest, AnotherActivationLayoutIsNamed) {
  TrainConfig resnet = Config("bf16");
  resnet.model = "resnet18";  // --memory_format=auto: channels-last under bf16 on the CPU
  AutocastRecord saved = Bf16Record("onednn", kOtherCpu);
  saved.memory_format = "contiguous";
  AutocastResumePlan plan = PlanAutocastResume(saved, "ck/step-9", resnet, kCpu, Bf16GemmKernel::kAuto);
  ASSERT_EQ(plan.notes.size(), 1u);
  EXPECT_TRUE(absl::StrContains(
      plan.notes[0], "ck/step-9 ran with contiguous activations, this run with channels_last ones"))
      << plan.notes[0];
  EXPECT_TRUE(absl::StrContains(plan.notes[0], "not bit for bit")) << plan.notes[0];
  EXPECT_TRUE(plan.compare_kernel_after_choosing) << "the kernel is still compared";
  saved.memory_format = "channels_last";
  plan = PlanAutocastResume(saved, "ck/step-9", resnet, kCpu, Bf16GemmKernel::kAuto);
  EXPECT_TRUE(plan.notes.empty()) << plan.notes[0];
  // A record without the layout, resumed where auto picks channels-last: the run says how to resume NCHW.
  saved.memory_format = "";
  plan = PlanAutocastResume(saved, "ck/step-9", resnet, kCpu, Bf16GemmKernel::kAuto);
  ASSERT_EQ(plan.notes.size(), 1u);
  EXPECT_TRUE(absl::StrContains(plan.notes[0], "does not say which activation layout its steps ran"))
      << plan.notes[0];
  EXPECT_TRUE(absl::StrContains(plan.notes[0], "--memory_format=contiguous continues them bit for bit"))
      << plan.notes[0];
  resnet.memory_format = "channels_last";  // chosen by the user: nothing to say
  plan = PlanAutocastResume(saved, "ck/step-9", resnet, kCpu, Bf16GemmKernel::kAuto);
  EXPECT_TRUE(plan.notes.empty()) << plan.notes[0];
  resnet.memory_format = "contiguous";
  saved.memory_format = "channels_last";
  plan = PlanAutocastResume(saved, "ck/step-9", resnet, kCpu, Bf16GemmKernel::kAuto);
  ASSERT_EQ(plan.notes.size(), 1u);
  EXPECT_TRUE(
      absl::StrContains(plan.notes[0], "ran with channels_last activations, this run with contiguous"))
      << plan.notes[0];
}

TEST(AutocastRecordTest, OtherPrecisionsHaveNoKernelToKeep) {
  for (const AutocastRecord& saved :
       {AutocastRecord{"fp32", "cpu", "", kCpu}, AutocastRecord{"fp16", "cpu", "", kCpu},
        AutocastRecord{"bf16", "cuda", "", kCpu}}) {
    const AutocastResumePlan plan = PlanAutocastResume(
        saved, "ck/step-9", Config(saved.precision, saved.device), kCpu, Bf16GemmKernel::kAuto);
    EXPECT_FALSE(plan.keep_kernel.has_value()) << saved.precision << " " << saved.device;
    EXPECT_FALSE(plan.compare_kernel_after_choosing);
    EXPECT_TRUE(plan.notes.empty());
  }
}

}  // namespace
}  // namespace ddp
