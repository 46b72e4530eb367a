#include "tensor/tensor.h"

#include <gtest/gtest.h>

#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

TEST(TensorTest, EmptyIsContiguousAndAligned) {
  Tensor t = Tensor::Empty({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
}

TEST(TensorTest, ReshapeOfContiguousSharesStorage) {
  Tensor t = Arange(6);
  Tensor r = Reshape(t, {2, -1});
  EXPECT_EQ(r.shape(), (Shape{2, 3}));
  EXPECT_EQ(r.storage(), t.storage());
  r.data<float>()[4] = 42.0f;
  EXPECT_EQ(t.ToVector<float>()[4], 42.0f);
}

TEST(TensorTest, NarrowAndFlatSliceAreViews) {
  Tensor flat = Zeros({10});
  Tensor part = Reshape(Narrow(flat, 0, 4, 6), {2, 3});
  FillInPlace(part, 1.0f);
  EXPECT_EQ(flat.ToVector<float>(), (std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(part.storage_offset(), 4);
}

TEST(TensorTest, TransposeIsStridedViewAndContiguousCopies) {
  Tensor t = Reshape(Arange(6), {2, 3});
  Tensor tt = Transpose(t, 0, 1);
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.storage(), t.storage());
  EXPECT_EQ(Contiguous(tt).ToVector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(TensorTest, BroadcastingAdd) {
  Tensor a = Reshape(Arange(6), {2, 3});
  Tensor b = FromVector(std::vector<float>{10, 20, 30}, {3});
  EXPECT_EQ(Add(a, b).ToVector<float>(), (std::vector<float>{10, 21, 32, 13, 24, 35}));
  Tensor c = FromVector(std::vector<float>{100, 200}, {2, 1});
  EXPECT_EQ(Add(a, c).ToVector<float>(), (std::vector<float>{100, 101, 102, 203, 204, 205}));
  EXPECT_EQ(BroadcastShapes({4, 1, 3}, {5, 1}), (Shape{4, 5, 3}));
}

TEST(TensorTest, ReductionsOverDims) {
  Tensor a = Reshape(Arange(24), {2, 3, 4});
  EXPECT_FLOAT_EQ(Sum(a).item(), 276.0);
  Tensor s = Sum(a, {0, 2});
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_EQ(s.ToVector<float>(), (std::vector<float>{60, 92, 124}));
  EXPECT_EQ(Mean(a, {1}, true).shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(Argmax(FromVector(std::vector<float>{1, 5, 5, 2, 0, 9}, {2, 3}), 1).ToVector<int64_t>(),
            (std::vector<int64_t>{1, 2}));
}

TEST(TensorTest, MatmulWithTransposedViewsMatchesReference) {
  Generator g(3);
  Tensor a = Uniform({5, 7}, -1, 1, g), b = Uniform({4, 7}, -1, 1, g);
  Tensor c = Matmul(a, Transpose(b, 0, 1));
  std::vector<float> va = a.ToVector<float>(), vb = b.ToVector<float>(), vc = c.ToVector<float>();
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 4; ++j) {
      double ref = 0;
      for (int k = 0; k < 7; ++k) ref += va[i * 7 + k] * vb[j * 7 + k];
      EXPECT_NEAR(vc[i * 4 + j], ref, 1e-5);
    }
  }
}

TEST(TensorTest, HalfAndBFloat16RoundTrip) {
  Tensor x = FromVector(std::vector<float>{0.0f, 1.0f, -2.5f, 65504.0f, 1e-6f, 3.14159f}, {6});
  std::vector<float> half = ToDType(ToDType(x, DType::kFloat16), DType::kFloat32).ToVector<float>();
  EXPECT_EQ(half[1], 1.0f);
  EXPECT_EQ(half[2], -2.5f);
  EXPECT_EQ(half[3], 65504.0f);
  EXPECT_NEAR(half[4], 1e-6f, 1e-7f);
  EXPECT_NEAR(half[5], 3.14159f, 2e-3f);
  std::vector<float> bf = ToDType(ToDType(x, DType::kBFloat16), DType::kFloat32).ToVector<float>();
  EXPECT_EQ(bf[2], -2.5f);
  EXPECT_NEAR(bf[5], 3.14159f, 2e-2f);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);  // overflow to +inf
}

TEST(TensorTest, CatAlongDims) {
  Tensor a = Reshape(Arange(4), {2, 2}), b = Reshape(Arange(2), {2, 1});
  EXPECT_EQ(Cat({a, b}, 1).ToVector<float>(), (std::vector<float>{0, 1, 0, 2, 3, 1}));
}

TEST(TensorDeathTest, ShapeMismatchNamesShapes) {
  EXPECT_DEATH(Add(Zeros({2, 3}), Zeros({4})), "shapes \\[2, 3\\] and \\[4\\] do not broadcast");
  EXPECT_DEATH(Matmul(Zeros({2, 3}), Zeros({4, 2})), "Matmul: \\[2, 3\\] x \\[4, 2\\]");
}

}  // namespace
}  // namespace ddp
