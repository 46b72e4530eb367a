// --bucket_cap_mb=auto end to end on loopback: train/train on 2 ranks over Gloo
// measures, prints its choice and then the measured step time, finishes, and trains exactly the model a
// run with the chosen caps fixed from the start trains (at two ranks the sum of two gradients does not
// depend on the bucket layout, so the weights must be bit-identical). Checkpoints keep the choice: a
// resume on as many ranks reuses it without measuring, one on another world size chooses again (Note
// [Auto bucket caps] step 4).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "testing/process.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Train(int ranks, const std::string& flags) {
  return absl::StrCat(Runfile("launch/ddprun"), " --nproc_per_node=", ranks, " --master_port=0 ",
                      Runfile("train/train"),
                      " --backend=gloo --model=mlp --epochs=1 --seed=3 --grad_as_bucket_view ", flags);
}
std::string Train2(const std::string& flags) { return Train(2, "--max_steps=30 " + flags); }

// The "first F MiB, cap C MiB" that follows `prefix` in `output` as "F/C"; "" when it is not there.
std::string CapsAfter(const std::string& output, const std::string& prefix) {
  const size_t at = output.find(prefix);
  if (at == std::string::npos) return "";
  const size_t start = output.find("first ", at);
  if (start == std::string::npos) return "";
  char first[32] = {0}, cap[32] = {0};
  if (std::sscanf(output.c_str() + start, "first %31s MiB, cap %31[^ ] MiB", first, cap) != 2) return "";
  return absl::StrCat(first, "/", cap);
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

// Steps: the choice comes after 5 skipped + 4 + 1 measured iterations (step 10), before step 12's
// checkpoint; a resume that chooses again needs 10 steps of its own.
TEST(AutoBucketCapsTrainTest, ResumeReusesTheSavedChoiceOnTheSameWorldSizeOnly) {
  const std::string dir = TempPath("auto_caps_ckpt"), dir3 = TempPath("auto_caps_ckpt3");
  const std::string flags = " --bucket_cap_mb=auto --auto_caps_steps=4 --checkpoint_every=6 --checkpoint_dir=";
  std::string first;
  ASSERT_EQ(RunShell(absl::StrCat("rm -rf ", dir, " ", dir3), &first), 0) << first;  // a fresh start
  ASSERT_EQ(RunShell(Train(2, "--max_steps=12" + flags + dir), &first), 0) << first;
  const std::string chosen = CapsAfter(first, "auto bucket caps: first");
  ASSERT_NE(chosen, "") << first;
  std::string copy;
  ASSERT_EQ(RunShell(absl::StrCat("rm -rf ", dir3, " && cp -r ", dir, " ", dir3), &copy), 0) << copy;

  // Same world size and backend: the choice is applied from step 13 on, nothing is measured again, and
  // the next checkpoint keeps it.
  std::string resumed;
  ASSERT_EQ(RunShell(Train(2, "--max_steps=18 --resume" + flags + dir), &resumed), 0) << resumed;
  EXPECT_THAT(resumed, HasSubstr("resuming from " + dir + "/step-12"));
  EXPECT_THAT(resumed, HasSubstr("auto bucket caps: reusing the choice from " + dir + "/step-12: "));
  EXPECT_EQ(CapsAfter(resumed, "auto bucket caps: reusing the choice"), chosen) << resumed;
  EXPECT_THAT(resumed, HasSubstr("(chosen for 2 ranks over gloo; predicted "));
  EXPECT_THAT(resumed, Not(HasSubstr("auto bucket caps: first"))) << "measured and chose again";
  std::string manifest;
  ASSERT_EQ(RunShell("cat " + dir + "/step-18/manifest.json", &manifest), 0) << manifest;
  EXPECT_THAT(manifest, HasSubstr("\"auto_bucket_caps\""));  // the record, as the manifest's escaped JSON text
  EXPECT_THAT(manifest, HasSubstr("\\\"world_size\\\":2"));

  // Three ranks: the saved choice does not describe this run; it says why, measures and chooses again.
  std::string three;
  ASSERT_EQ(RunShell(Train(3, "--max_steps=23 --resume" + flags + dir3), &three), 0) << three;
  EXPECT_THAT(three, HasSubstr("auto bucket caps: the choice in " + dir3 + "/step-12 (first "));
  EXPECT_THAT(three, HasSubstr("was made for 2 ranks over gloo, this run has 3 ranks over gloo: measuring and "
                               "choosing again"));
  EXPECT_EQ(CapsAfter(three, "auto bucket caps: the choice in"), chosen);
  EXPECT_THAT(three, Not(HasSubstr("reusing the choice")));
  EXPECT_THAT(three, HasSubstr("auto bucket caps: first ")) << "did not choose again";
}

// With a fixed --bucket_cap_mb the saved choice is ignored: the flag's caps stay and nothing is said.
TEST(AutoBucketCapsTrainTest, FixedCapsIgnoreTheSavedChoice) {
  const std::string dir = TempPath("auto_caps_fixed");
  std::string first;
  ASSERT_EQ(RunShell("rm -rf " + dir, &first), 0) << first;  // a fresh start
  ASSERT_EQ(RunShell(Train(2, "--max_steps=12 --bucket_cap_mb=auto --auto_caps_steps=4 --checkpoint_every=12 "
                              "--checkpoint_dir=" + dir),
                     &first),
            0)
      << first;
  ASSERT_THAT(first, HasSubstr("auto bucket caps: first"));
  std::string resumed;
  ASSERT_EQ(RunShell(Train(2, "--max_steps=14 --bucket_cap_mb=25 --resume --checkpoint_dir=" + dir), &resumed), 0)
      << resumed;
  EXPECT_THAT(resumed, HasSubstr("resuming from " + dir + "/step-12"));
  EXPECT_THAT(resumed, Not(HasSubstr("auto bucket caps")));
}

TEST(AutoBucketCapsTrainTest, BadCapsAndConflictsAreUsageErrors) {
  std::string output;
  EXPECT_EQ(RunShell(Runfile("train/train") + " --bucket_cap_mb=big --max_steps=1", &output), 2);
  EXPECT_THAT(output, HasSubstr("--bucket_cap_mb must be a number >= 0 (MiB) or auto, got \"big\""));
  output.clear();
  EXPECT_EQ(RunShell(Runfile("train/train") + " --bucket_cap_mb=auto --zero --max_steps=1", &output), 2);
  EXPECT_THAT(output, HasSubstr("--bucket_cap_mb=auto rebuilds the buckets mid-run"));
}

}  // namespace
}  // namespace ddp
