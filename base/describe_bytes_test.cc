// DescribeBytes picks the unit by size.
#include "base/describe_bytes.h"

#include <gtest/gtest.h>

namespace ddp {
namespace {

TEST(DescribeBytesTest, PicksTheUnitBySize) {
  EXPECT_EQ(DescribeBytes(1234), "1234 bytes");
  EXPECT_EQ(DescribeBytes(64 * 1024 - 1), "65535 bytes");
  EXPECT_EQ(DescribeBytes(int64_t{64} << 20), "64.0 MiB");
  EXPECT_EQ(DescribeBytes(int64_t{1} << 30), "1.00 GiB");
  EXPECT_EQ(DescribeBytes(int64_t{3} << 29), "1.50 GiB");
}

}  // namespace
}  // namespace ddp
