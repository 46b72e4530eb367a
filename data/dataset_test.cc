#include "data/tensor_dataset.h"

#include <gtest/gtest.h>

#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

TEST(TensorDatasetTest, GetAndGetBatchAgree) {
  TensorDataset dataset(Reshape(Arange(12), {6, 2}), Arange(6, DType::kInt64));
  auto one = dataset.Get(4);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->input.ToVector<float>(), (std::vector<float>{8, 9}));
  EXPECT_EQ(one->target.item(), 4);
  auto batch = dataset.GetBatch({5, 0, 4});
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->input.shape(), (Shape{3, 2}));
  EXPECT_EQ(batch->input.ToVector<float>(), (std::vector<float>{10, 11, 0, 1, 8, 9}));
  EXPECT_EQ(batch->target.ToVector<int64_t>(), (std::vector<int64_t>{5, 0, 4}));
  // The generic collation path gives the same batch.
  auto collated = dataset.Dataset::GetBatch({5, 0, 4});
  ASSERT_TRUE(collated.ok());
  EXPECT_EQ(collated->input.ToVector<float>(), batch->input.ToVector<float>());
}

TEST(TensorDatasetTest, OutOfRangeIndexIsAnError) {
  TensorDataset dataset(Zeros({3, 2}), Zeros({3}, DType::kInt64));
  EXPECT_EQ(dataset.Get(3).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_FALSE(dataset.GetBatch({0, -1}).ok());
}

TEST(CollateTest, DifferentShapesAreNamed) {
  std::vector<Example> examples = {{Zeros({2}), Zeros({}, DType::kInt64)}, {Zeros({3}), Zeros({}, DType::kInt64)}};
  auto batch = Collate(examples);
  ASSERT_FALSE(batch.ok());
  EXPECT_NE(batch.status().message().find("example 1"), std::string::npos);
}

}  // namespace
}  // namespace ddp
