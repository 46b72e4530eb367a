#include "reducer/bucket_assignment.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace ddp {
namespace {

using Buckets = std::vector<std::vector<size_t>>;

std::vector<BucketParameter> Floats(const std::vector<int64_t>& numels) {
  std::vector<BucketParameter> params;
  for (int64_t n : numels) params.push_back({n, DType::kFloat32, Device::CPU()});
  return params;
}

TEST(BucketAssignmentTest, ReverseOrderWithFirstBucketCap) {
  // 4 params of 100 floats = 400 bytes each; first cap 400 B, others 1000 B.
  BucketCaps caps{400, 1000};
  EXPECT_EQ(AssignBuckets(Floats({100, 100, 100, 100}), caps), (Buckets{{3}, {2, 1, 0}}));
}

TEST(BucketAssignmentTest, CapZeroMeansOneBucketPerParameter) {
  EXPECT_EQ(AssignBuckets(Floats({5, 6, 7}), BucketCaps{0, 0}), (Buckets{{2}, {1}, {0}}));
}

TEST(BucketAssignmentTest, HugeCapMeansOneBucket) {
  EXPECT_EQ(AssignBuckets(Floats({5, 6, 7}), BucketCaps{1 << 30, 1 << 30}), (Buckets{{2, 1, 0}}));
}

TEST(BucketAssignmentTest, ParametersAreNeverSplitAndBucketsCloseOnceFull) {
  // 300 B, 800 B, 40 B, 40 B with cap 500 (first and later): [3,2] is 80 B (open), then 1 (800 B, closes),
  // then 0 alone.
  BucketCaps caps{500, 500};
  EXPECT_EQ(AssignBuckets(Floats({75, 200, 10, 10}), caps), (Buckets{{3, 2, 1}, {0}}));
}

TEST(BucketAssignmentTest, DtypesAndDevicesNeverShareABucket) {
  std::vector<BucketParameter> params = Floats({10, 10, 10, 10});
  params[1].dtype = DType::kFloat16;
  params[2].device = Device::CUDA(0);
  const Buckets buckets = AssignBuckets(params, BucketCaps{1 << 20, 1 << 20});
  EXPECT_EQ(buckets, (Buckets{{3, 0}, {2}, {1}}));
}

TEST(BucketAssignmentTest, ExplicitOrderIsFollowed) {
  BucketCaps caps{400, 400};
  EXPECT_EQ(AssignBuckets(Floats({100, 100, 100}), caps, {1, 0, 2}), (Buckets{{1}, {0}, {2}}));
}

TEST(BucketAssignmentTest, EveryParameterAppearsExactlyOnce) {
  std::vector<int64_t> numels;
  for (int i = 0; i < 37; ++i) numels.push_back((i * 7919) % 1000 + 1);
  for (size_t cap : {size_t{0}, size_t{64}, size_t{4096}, size_t{1} << 20}) {
    const Buckets buckets = AssignBuckets(Floats(numels), BucketCaps{cap / 2, cap});
    std::vector<int> count(numels.size(), 0);
    for (const auto& b : buckets) {
      ASSERT_FALSE(b.empty());
      for (size_t i : b) ++count[i];
    }
    for (int c : count) EXPECT_EQ(c, 1);
  }
}

TEST(BucketAssignmentTest, DescribeListsBytesAndNames) {
  const std::string text = DescribeBuckets({{1, 0}}, Floats({256, 2}), {"w", "b"});
  EXPECT_EQ(text, "bucket 0: 2 params, 1.0 KiB: b w\n");
  // Buckets in a reduce dtype of 2 bytes hold half as many bytes, and say in which dtype.
  EXPECT_EQ(DescribeBuckets({{1, 0}}, Floats({256, 2}), {"w", "b"}, DType::kBFloat16),
            "bucket 0: 2 params, 0.5 KiB bfloat16: b w\n");
}

TEST(BucketAssignmentTest, GradientOrderTextRoundTripsAndCompletes) {
  EXPECT_EQ(GradientOrderText({4, 0, 2}), "4,0,2");
  // The listed indices, then the rest in reverse registration order.
  EXPECT_EQ(*ParseGradientOrder("4,0,2", 5), (std::vector<size_t>{4, 0, 2, 3, 1}));
  EXPECT_EQ(*ParseGradientOrder("", 3), (std::vector<size_t>{2, 1, 0}));
  for (const char* bad : {"0,0", "1,7", "x", "-1"}) {
    const absl::StatusOr<std::vector<size_t>> order = ParseGradientOrder(bad, 5);
    ASSERT_FALSE(order.ok()) << bad;
    EXPECT_EQ(order.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(order.status().message().find(absl::StrCat("\"", bad, "\"")), std::string::npos)
        << order.status();
  }
}

TEST(BucketAssignmentDeathTest, OrderMustBeAPermutation) {
  EXPECT_DEATH(AssignBuckets(Floats({1, 2}), BucketCaps{}, {0, 0}), "not a permutation");
}

}  // namespace
}  // namespace ddp
