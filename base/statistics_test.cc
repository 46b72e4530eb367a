#include "base/statistics.h"

#include "gtest/gtest.h"

namespace ddp {
namespace {

TEST(MedianTest, OddAndEvenCountsAndNone) {
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(Median({7}), 7);
  EXPECT_EQ(Median({}), 0);
}

TEST(PercentileTest, RoundsToTheNearestIndexOfTheSortedValues) {
  const std::vector<double> v = {50, 10, 40, 20, 30};
  EXPECT_EQ(Percentile(v, 0), 10);
  EXPECT_EQ(Percentile(v, 1), 50);
  EXPECT_EQ(Percentile(v, 0.5), 30);
  EXPECT_EQ(Percentile(v, 0.9), 50);  // index round(3.6) = 4
  EXPECT_EQ(Percentile({1, 2, 3, 4}, 0.5), 3);  // the upper of the middle pair
  EXPECT_EQ(Percentile({}, 0.5), 0);
}

}  // namespace
}  // namespace ddp
