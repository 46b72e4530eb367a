// Every differentiable op's backward against central finite differences.
#include <gtest/gtest.h>

#include "tensor/factory.h"
#include "tensor/gradcheck.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

using Inputs = std::vector<Tensor>;

// Values bounded away from 0 (for relu's kink and division).
Tensor AwayFromZero(const Shape& shape, uint64_t seed) {
  Tensor t = UniformLeaf(shape, seed, 0.2f, 1.0f);
  Generator g(seed + 1);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) if (g.Uniform(0, 1) < 0.5f) p[i] = -p[i];
  return t;
}

#define EXPECT_GRADCHECK(fn, inputs) EXPECT_EQ(GradCheck(fn, inputs), "")

TEST(OpsGradCheck, AddSubMulDivWithBroadcasting) {
  Inputs in = {UniformLeaf({3, 4}, 1), UniformLeaf({4}, 2)};
  EXPECT_GRADCHECK([](const Inputs& x) { return Add(x[0], x[1]); }, in);
  EXPECT_GRADCHECK([](const Inputs& x) { return Sub(x[0], x[1]); }, in);
  EXPECT_GRADCHECK([](const Inputs& x) { return Mul(x[0], x[1]); }, in);
  Inputs div = {UniformLeaf({3, 4}, 3), UniformLeaf({3, 1}, 4, 0.5f, 1.5f)};
  EXPECT_GRADCHECK([](const Inputs& x) { return Div(x[0], x[1]); }, div);
}

TEST(OpsGradCheck, UnaryOps) {
  EXPECT_GRADCHECK([](const Inputs& x) { return Relu(x[0]); }, Inputs{AwayFromZero({5, 3}, 5)});
  EXPECT_GRADCHECK([](const Inputs& x) { return Exp(x[0]); }, Inputs{UniformLeaf({7}, 6)});
  EXPECT_GRADCHECK([](const Inputs& x) { return Log(x[0]); }, Inputs{UniformLeaf({7}, 7, 0.5f, 2.0f)});
  EXPECT_GRADCHECK([](const Inputs& x) { return Sqrt(x[0]); }, Inputs{UniformLeaf({7}, 8, 0.5f, 2.0f)});
  EXPECT_GRADCHECK([](const Inputs& x) { return Neg(AddScalar(MulScalar(x[0], 3.0f), 1.0f)); },
                   Inputs{UniformLeaf({4}, 9)});
}

TEST(OpsGradCheck, Reductions) {
  Inputs in = {UniformLeaf({2, 3, 4}, 10)};
  EXPECT_GRADCHECK([](const Inputs& x) { return Sum(x[0]); }, in);
  EXPECT_GRADCHECK([](const Inputs& x) { return Mean(x[0]); }, in);
  EXPECT_GRADCHECK([](const Inputs& x) { return Sum(x[0], {0, 2}); }, in);
  EXPECT_GRADCHECK([](const Inputs& x) { return Mean(x[0], {1}, true); }, in);
  // Global average pooling as ResNet's AdaptiveAvgPool2d(1) runs it: each [h, w] plane's mean.
  EXPECT_GRADCHECK([](const Inputs& x) { return Mean(x[0], {2, 3}, true); }, (Inputs{UniformLeaf({2, 3, 4, 5}, 12)}));
}

TEST(OpsGradCheck, ShapeOps) {
  Inputs in = {UniformLeaf({2, 3, 4}, 11)};
  EXPECT_GRADCHECK([](const Inputs& x) { return Mul(Reshape(x[0], {6, 4}), Reshape(x[0], {6, 4})); }, in);
  EXPECT_GRADCHECK([](const Inputs& x) { return Flatten(x[0]); }, in);
  EXPECT_GRADCHECK([](const Inputs& x) { return Contiguous(Transpose(x[0], 0, 2)); }, in);
  EXPECT_GRADCHECK([](const Inputs& x) { return Narrow(x[0], 1, 1, 2); }, in);
  Inputs two = {UniformLeaf({2, 3}, 12), UniformLeaf({2, 2}, 13)};
  EXPECT_GRADCHECK([](const Inputs& x) { return Cat({x[0], x[1]}, 1); }, two);
}

TEST(OpsGradCheck, MatmulAndLinear) {
  Inputs mm = {UniformLeaf({4, 5}, 14), UniformLeaf({5, 3}, 15)};
  EXPECT_GRADCHECK([](const Inputs& x) { return Matmul(x[0], x[1]); }, mm);
  EXPECT_GRADCHECK([](const Inputs& x) { return Matmul(Transpose(x[1], 0, 1), Transpose(x[0], 0, 1)); }, mm);
  Inputs lin = {UniformLeaf({6, 5}, 16), UniformLeaf({3, 5}, 17), UniformLeaf({3}, 18)};
  EXPECT_GRADCHECK([](const Inputs& x) { return Linear(x[0], x[1], x[2]); }, lin);
  EXPECT_GRADCHECK([](const Inputs& x) { return Linear(x[0], x[1], Tensor()); }, Inputs(lin.begin(), lin.begin() + 2));
}

TEST(OpsGradCheck, LogSoftmaxNllAndCrossEntropy) {
  Tensor target = FromVector(std::vector<int64_t>{0, 3, 1, 3, 2}, {5});
  Inputs in = {UniformLeaf({5, 4}, 19, -2.0f, 2.0f)};
  EXPECT_GRADCHECK([](const Inputs& x) { return LogSoftmax(x[0], 1); }, in);
  EXPECT_GRADCHECK([target](const Inputs& x) { return NllLoss(LogSoftmax(x[0], 1), target); }, in);
  EXPECT_GRADCHECK([target](const Inputs& x) { return CrossEntropy(x[0], target); }, in);
}

TEST(OpsValues, CrossEntropyEqualsNllOfLogSoftmax) {
  Tensor target = FromVector(std::vector<int64_t>{2, 0, 1}, {3});
  Tensor logits = UniformLeaf({3, 4}, 20, -3.0f, 3.0f);
  EXPECT_NEAR(CrossEntropy(logits, target).item(), NllLoss(LogSoftmax(logits, 1), target).item(), 1e-6);
}

TEST(OpsDeathTest, BadLabelIsNamed) {
  Tensor target = FromVector(std::vector<int64_t>{0, 7}, {2});
  EXPECT_DEATH(CrossEntropy(Zeros({2, 4}), target), "target 7 at index 1 is out of range \\[0, 4\\)");
}

}  // namespace
}  // namespace ddp
