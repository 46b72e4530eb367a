// The pure decisions of DataParallel: chunk sizes and the GPU balance warning.
#include "dp/data_parallel_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

namespace ddp {
namespace {

using ::testing::HasSubstr;

TEST(ScatterSizesTest, BalancedLargerChunksFirst) {
  EXPECT_EQ(ScatterSizes(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(ScatterSizes(5, 4), (std::vector<int64_t>{2, 1, 1, 1}));
  EXPECT_EQ(ScatterSizes(8, 2), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(ScatterSizes(128, 3), (std::vector<int64_t>{43, 43, 42}));
  EXPECT_EQ(ScatterSizes(7, 1), (std::vector<int64_t>{7}));
}

TEST(ScatterSizesTest, FewerChunksThanDevicesNeverEmpty) {
  EXPECT_EQ(ScatterSizes(3, 4), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(ScatterSizes(1, 8), (std::vector<int64_t>{1}));
}

TEST(ScatterSizesTest, CoversTheBatchWithSizesWithinOne) {
  for (int64_t batch = 1; batch <= 40; ++batch) {
    for (int devices = 1; devices <= 9; ++devices) {
      const std::vector<int64_t> sizes = ScatterSizes(batch, devices);
      EXPECT_EQ(std::accumulate(sizes.begin(), sizes.end(), int64_t{0}), batch);
      EXPECT_EQ(sizes.size(), static_cast<size_t>(std::min<int64_t>(batch, devices)));
      EXPECT_GE(sizes.back(), 1);
      EXPECT_LE(sizes.front() - sizes.back(), 1);
    }
  }
}

TEST(ScatterSizesTest, RejectsAnEmptyBatch) {
  EXPECT_DEATH(ScatterSizes(0, 2), "batch must be >= 1");
}

DeviceCapacity Gpu(int device, int64_t gib, int sms) { return {device, gib << 30, sms}; }

TEST(CheckDeviceBalanceTest, BalancedDevicesGiveNoWarning) {
  EXPECT_FALSE(CheckDeviceBalance({Gpu(0, 80, 132), Gpu(1, 80, 132)}).has_value());
  EXPECT_FALSE(CheckDeviceBalance({Gpu(0, 80, 132), Gpu(1, 64, 108)}).has_value());  // 0.8 and 0.82
  EXPECT_FALSE(CheckDeviceBalance({Gpu(0, 16, 80)}).has_value());
  EXPECT_FALSE(CheckDeviceBalance({}).has_value());
}

TEST(CheckDeviceBalanceTest, LessThanThreeQuartersOfTheMemoryWarnsNamingBothDevices) {
  auto warning = CheckDeviceBalance({Gpu(0, 80, 132), Gpu(1, 24, 132), Gpu(2, 80, 132)});
  ASSERT_TRUE(warning.has_value());
  EXPECT_THAT(*warning, HasSubstr("exclude GPU 1 which has less than 75% of the memory or cores of GPU 0"));
}

TEST(CheckDeviceBalanceTest, LessThanThreeQuartersOfTheCoresWarns) {
  auto warning = CheckDeviceBalance({Gpu(3, 24, 28), Gpu(5, 24, 82)});
  ASSERT_TRUE(warning.has_value());
  EXPECT_THAT(*warning, HasSubstr("exclude GPU 3"));
  EXPECT_THAT(*warning, HasSubstr("of GPU 5"));
}

}  // namespace
}  // namespace ddp
