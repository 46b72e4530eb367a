#include "bench/step_times.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace ddp {
namespace {

TEST(SpreadOfTest, PercentilesAndCoefficientOfVariation) {
  // 1..10 in shuffled order: p50 at index round(4.5) = 5 of the sorted values, 6; p90 at round(8.1) = 8,
  // 9; mean 5.5, population stdev sqrt(8.25).
  StepTimeSpread spread = SpreadOf({7, 2, 10, 4, 1, 9, 3, 6, 8, 5});
  EXPECT_DOUBLE_EQ(spread.p50_ms, 6);
  EXPECT_DOUBLE_EQ(spread.p90_ms, 9);
  EXPECT_NEAR(spread.cv, 2.8722813232690143 / 5.5, 1e-12);
}

TEST(SpreadOfTest, OneStepAndEqualSteps) {
  StepTimeSpread one = SpreadOf({4.5});
  EXPECT_DOUBLE_EQ(one.p50_ms, 4.5);
  EXPECT_DOUBLE_EQ(one.p90_ms, 4.5);
  EXPECT_DOUBLE_EQ(one.cv, 0);
  EXPECT_DOUBLE_EQ(SpreadOf({3, 3, 3}).cv, 0);
}

TEST(WriteStepTimesTest, OneLinePerStep) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/steps.txt";
  ASSERT_TRUE(WriteStepTimes(path, {1.5, 2.25}).ok());
  std::ifstream in(path);
  std::string a, b, c;
  ASSERT_TRUE(std::getline(in, a) && std::getline(in, b));
  EXPECT_EQ(a, "1.5000");
  EXPECT_EQ(b, "2.2500");
  EXPECT_FALSE(std::getline(in, c));
}

TEST(WriteStepTimesTest, UnwritablePathIsNamed) {
  absl::Status status = WriteStepTimes("/nonexistent-dir/steps.txt", {1.0});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("/nonexistent-dir/steps.txt"), std::string::npos) << status;
}

}  // namespace
}  // namespace ddp
