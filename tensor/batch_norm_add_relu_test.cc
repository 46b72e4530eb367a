// BatchNormAddRelu (tensor/batch_norm.h) against BatchNorm, Add and Relu run one after another: the
// output, every gradient and the running statistics agree bit for bit (Note [BatchNorm, Add and ReLU in
// one op]), with and without a residual, in training and eval; plus finite differences and shape errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <vector>

#include "tensor/autograd.h"
#include "tensor/batch_norm.h"
#include "tensor/factory.h"
#include "tensor/gradcheck.h"
#include "tensor/ops.h"
#include "tensor/test_tensors.h"

namespace ddp {
namespace {

using testing_tensors::ExpectSameBits;
using testing_tensors::Leaf;

using Inputs = std::vector<Tensor>;

struct Outcome {
  Tensor y, gx, gr, gw, gb, running_mean, running_var;
};

// One forward and backward (with a fixed, sign-mixed output gradient) of the fused op or of the three ops.
Outcome RunOnce(bool fused, bool with_residual, bool training, const Shape& shape) {
  const int64_t c = shape[1];
  Tensor x = Leaf(shape, 1, -2.0f, 3.0f), residual = with_residual ? Leaf(shape, 2, -1.5f, 1.0f) : Tensor();
  Tensor weight = Leaf({c}, 3, 0.5f, 1.5f), bias = Leaf({c}, 4, -0.5f, 0.5f);
  Generator g(5);
  Tensor running_mean = Uniform({c}, -0.5f, 0.5f, g), running_var = Uniform({c}, 0.5f, 2.0f, g);
  Tensor y =
      fused ? BatchNormAddRelu(x, residual, weight, bias, running_mean, running_var, training, 0.1f, 1e-5f)
            : Relu(with_residual
                       ? Add(BatchNorm(x, weight, bias, running_mean, running_var, training, 0.1f, 1e-5f),
                             residual)
                       : BatchNorm(x, weight, bias, running_mean, running_var, training, 0.1f, 1e-5f));
  Generator gg(6);
  y.Backward(Uniform(shape, -1.0f, 1.0f, gg));
  const Tensor gr = with_residual ? residual.grad() : Tensor();
  return {y.Detach(), x.grad(), gr, weight.grad(), bias.grad(), running_mean, running_var};
}

class BatchNormAddReluTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(BatchNormAddReluTest, BitForBitTheThreeOps) {
  const auto [with_residual, training] = GetParam();
  for (const Shape& shape : {Shape{8, 16, 7, 7}, Shape{3, 5, 4, 3}, Shape{8, 16, 28, 28}, Shape{6, 4}}) {
    SCOPED_TRACE(ShapeToString(shape));
    const Outcome fused = RunOnce(true, with_residual, training, shape);
    const Outcome plain = RunOnce(false, with_residual, training, shape);
    ExpectSameBits(fused.y, plain.y, "output");
    ExpectSameBits(fused.gx, plain.gx, "input gradient");
    if (with_residual) ExpectSameBits(fused.gr, plain.gr, "residual gradient");
    ExpectSameBits(fused.gw, plain.gw, "weight gradient");
    ExpectSameBits(fused.gb, plain.gb, "bias gradient");
    ExpectSameBits(fused.running_mean, plain.running_mean, "running_mean");
    ExpectSameBits(fused.running_var, plain.running_var, "running_var");
    // ReLU really clamps: some outputs are zero, some positive.
    const std::vector<float> y = fused.y.ToVector<float>();
    EXPECT_GT(std::count(y.begin(), y.end(), 0.0f), 0);
    EXPECT_GT(std::count_if(y.begin(), y.end(), [](float v) { return v > 0.0f; }), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(ResidualAndMode, BatchNormAddReluTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(BatchNormAddReluGradTest, FiniteDifferences) {
  // Values away from ReLU's kink: the check perturbs inputs by GradCheck's eps.
  Tensor x = Leaf({3, 2, 3, 2}, 11, -2.0f, 2.0f), residual = Leaf({3, 2, 3, 2}, 12, 0.6f, 1.5f);
  Tensor weight = Leaf({2}, 13, 0.5f, 1.5f), bias = Leaf({2}, 14, -0.2f, 0.2f);
  EXPECT_EQ(GradCheck(
                [](const Inputs& in) {
                  return BatchNormAddRelu(in[0], in[1], in[2], in[3], Tensor(), Tensor(), true, 0.1f, 1e-5f);
                },
                Inputs{x, residual, weight, bias}),
            "");
}

TEST(BatchNormAddReluDeathTest, ResidualOfAnotherShapeIsRejected) {
  Tensor x = Leaf({2, 3, 4, 4}, 21, -1.0f, 1.0f), residual = Leaf({2, 3, 2, 2}, 22, -1.0f, 1.0f);
  EXPECT_DEATH(BatchNormAddRelu(x, residual, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1f, 1e-5f),
               "residual \\[2, 3, 2, 2\\] does not match input \\[2, 3, 4, 4\\]");
}

}  // namespace
}  // namespace ddp
