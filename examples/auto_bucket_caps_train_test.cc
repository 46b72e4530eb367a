// --bucket_cap_mb=auto end to end on loopback (issue 16 item 6): examples/train on 2 ranks over Gloo
// measures, prints its choice and then the measured step time, finishes, and trains exactly the model a
// run with the chosen caps fixed from the start trains (at two ranks the sum of two gradients does not
// depend on the bucket layout, so the weights must be bit-identical).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "testing/process.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

std::string Train2(const std::string& flags) {
  return absl::StrCat(
      Runfile("launch/ddprun"), " --nproc_per_node=2 --master_port=0 ", Runfile("examples/train"),
      " --backend=gloo --model=mlp --epochs=1 --max_steps=30 --seed=3 --grad_as_bucket_view ", flags);
}

// "inf" (one bucket) as a number the flag takes.
std::string CapFlag(const std::string& mib) { return mib == "inf" ? std::string("1000000") : mib; }

TEST(AutoBucketCapsTrainTest, ChoosesRebucketsAndTrainsLikeTheChosenCapsFixed) {
  const std::string auto_weights = TempPath("auto.safetensors");
  const std::string fixed_weights = TempPath("fixed.safetensors");
  std::string output;
  ASSERT_EQ(RunShell(Train2("--bucket_cap_mb=auto --auto_caps_steps=8 --save=" + auto_weights), &output), 0)
      << output;
  const size_t at = output.find("auto bucket caps: first ");
  ASSERT_NE(at, std::string::npos) << output;
  char first[32] = {0}, cap[32] = {0};
  double predicted = -1;
  ASSERT_EQ(std::sscanf(output.c_str() + at,
                        "auto bucket caps: first %31s MiB, cap %31s MiB, %*d buckets (predicted %lf", first,
                        cap, &predicted),
            3)
      << output.substr(at, 200);
  EXPECT_GT(predicted, 0);
  EXPECT_THAT(output, HasSubstr("auto bucket caps: measured "));
  EXPECT_THAT(output, HasSubstr("over the next 8 steps"));
  EXPECT_THAT(output, HasSubstr("final test_acc"));

  std::string fixed_output;
  ASSERT_EQ(RunShell(Train2(absl::StrCat("--bucket_cap_mb=", CapFlag(cap),
                                         " --first_bucket_mb=", CapFlag(first), " --save=", fixed_weights)),
                     &fixed_output),
            0)
      << fixed_output;
  std::string cmp;
  EXPECT_EQ(RunShell(absl::StrCat("cmp ", auto_weights, " ", fixed_weights), &cmp), 0)
      << "weights differ after auto caps " << first << "/" << cap << ": " << cmp;
}

TEST(AutoBucketCapsTrainTest, BadCapsAndConflictsAreUsageErrors) {
  std::string output;
  EXPECT_EQ(RunShell(Runfile("examples/train") + " --bucket_cap_mb=big --max_steps=1", &output), 2);
  EXPECT_THAT(output, HasSubstr("--bucket_cap_mb must be a number >= 0 (MiB) or auto, got \"big\""));
  output.clear();
  EXPECT_EQ(RunShell(Runfile("examples/train") + " --bucket_cap_mb=auto --zero --max_steps=1", &output), 2);
  EXPECT_THAT(output, HasSubstr("--bucket_cap_mb=auto rebuilds the buckets mid-run"));
}

}  // namespace
}  // namespace ddp
