// ddprun --elastic on small shell commands: a failing worker does not stop the others, the loss is
// recorded, and the job's exit code follows the survivors; the elastic options' checks.
#include "launch/elastic_launch.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/process.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ProcessResult RunDdprun(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {Runfile("launch/ddprun"), "--master_port=0"};
  argv.insert(argv.end(), args.begin(), args.end());
  RunOptions options;
  options.timeout = absl::Seconds(60);
  return RunProcess(argv, options);
}

// Rank 1 fails at once; ranks 0 and 2 are not stopped and finish: the job succeeds, naming the loss.
TEST(ElasticLaunchTest, AFailedWorkerDoesNotStopTheOthersAndTheJobSucceedsWithThem) {
  const ProcessResult r = RunDdprun({"--elastic", "--nproc_per_node=3", "/bin/sh", "-c",
                                     "if [ $RANK = 1 ]; then exit 3; fi; "
                                     "echo E=$DDP_ELASTIC M=$DDP_ELASTIC_MIN_WORLD_SIZE; echo done"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.err, HasSubstr("ddprun: elastic: rank 1 failed with exit code 3; the others go on"));
  EXPECT_THAT(r.err, HasSubstr("ddprun: elastic: the job finished without the lost rank(s) 1"));
  EXPECT_THAT(r.out, HasSubstr("[rank 0] E=1 M=1"));
  EXPECT_THAT(r.out, HasSubstr("[rank 0] done"));
  EXPECT_THAT(r.out, HasSubstr("[rank 2] done"));
}

TEST(ElasticLaunchTest, WhenEveryWorkerFailsTheJobFailsAsTheFirst) {
  const ProcessResult r = RunDdprun({"--elastic", "--nproc_per_node=2", "/bin/sh", "-c", "exit 4"});
  EXPECT_EQ(r.exit_code, 4) << r.all();
  EXPECT_THAT(r.err, HasSubstr("failed first with exit code 4"));
}

TEST(ElasticLaunchTest, TheMinimumWorldSizeIsCheckedAndNeedsElastic) {
  EXPECT_TRUE(ValidateElasticLaunchOptions(ElasticLaunchOptions{true, 2}, 3).ok());
  EXPECT_TRUE(ValidateElasticLaunchOptions(ElasticLaunchOptions{}, 1).ok());
  EXPECT_FALSE(ValidateElasticLaunchOptions(ElasticLaunchOptions{true, 4}, 3).ok());
  EXPECT_FALSE(ValidateElasticLaunchOptions(ElasticLaunchOptions{true, 0}, 3).ok());
  EXPECT_FALSE(ValidateElasticLaunchOptions(ElasticLaunchOptions{false, 2}, 3).ok());
  const ProcessResult r = RunDdprun({"--elastic", "--min_world_size=5", "--nproc_per_node=2", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_THAT(r.err, HasSubstr("--min_world_size must be in [1, 2]"));
  EXPECT_TRUE(ElasticWorkerVariables(ElasticLaunchOptions{}).empty());
  EXPECT_EQ(ElasticWorkerVariables(ElasticLaunchOptions{true, 2}).at("DDP_ELASTIC_MIN_WORLD_SIZE"), "2");
}

// With --max_restarts, a lost worker's slot gets one new process with a new member id that knows it is a
// replacement; the budget bounds how many: rank 1 fails again as a replacement and is not replaced twice.
TEST(ElasticLaunchTest, ALostWorkerIsReplacedInItsSlotWithANewMemberIdWithinTheBudget) {
  const std::string flag = TempPath("replacement_started");
  std::remove(flag.c_str());
  const std::string script = absl::StrCat(
      "if [ \"$RANK\" = 1 ]; then ",
      "  if [ -n \"$DDP_ELASTIC_JOIN\" ]; then echo J=$DDP_ELASTIC_JOIN M=$DDP_ELASTIC_MEMBER; touch ", flag, "; fi; ",
      "  exit 3; ",
      "fi; ",
      "for i in $(seq 300); do [ -e ", flag, " ] && break; sleep 0.05; done; echo done");
  const ProcessResult r = RunDdprun({"--elastic", "--max_restarts=1", "--nproc_per_node=3", "/bin/sh", "-c", script});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.err, HasSubstr("ddprun: elastic: starting member 3 in rank 1's slot to rejoin the job (restart 1 of 1)"));
  EXPECT_THAT(r.out, HasSubstr("[rank 1] J=1 M=3"));
  EXPECT_THAT(r.err, HasSubstr("ddprun: elastic: member 3 in rank 1's slot failed with exit code 3"));
  EXPECT_THAT(r.err, HasSubstr("the job finished without the lost rank(s) 1, 3"));
  EXPECT_THAT(r.err, Not(HasSubstr("starting member 4")));
}

TEST(ElasticLaunchTest, AReplacementNeedsBudgetAndEnoughWorkersLeft) {
  EXPECT_TRUE(MayReplace(ElasticLaunchOptions{true, 2}, 1, 2));
  EXPECT_FALSE(MayReplace(ElasticLaunchOptions{true, 2}, 0, 2));   // no budget left
  EXPECT_FALSE(MayReplace(ElasticLaunchOptions{true, 2}, 1, 1));   // below --min_world_size: the job stops
  EXPECT_FALSE(MayReplace(ElasticLaunchOptions{false, 1}, 1, 2));  // not elastic
  EXPECT_FALSE(MayReplace(ElasticLaunchOptions{true, 1}, 1, 0));   // nobody left to join
  const auto variables = ReplacementVariables(7);
  EXPECT_EQ(variables.at("DDP_ELASTIC_JOIN"), "1");
  EXPECT_EQ(variables.at("DDP_ELASTIC_MEMBER"), "7");
}

}  // namespace
}  // namespace ddp
