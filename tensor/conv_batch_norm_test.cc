// ConvBatchNormAddRelu (tensor/conv_batch_norm.h) against the ops it fuses, Conv2d then BatchNormAddRelu:
// the output, the running statistics and every gradient bit for bit, under bf16 autocast on channels-last
// activations (the fused op, on the shapes that take each forward kernel: AMX one-row and grid kernels
// where this CPU has AMX, im2col and oneDNN otherwise and for a 1-channel input; with and without a
// residual), without autocast and in eval mode (the two ops). Plus the bad shapes.
#include "tensor/conv_batch_norm.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tensor/autocast.h"
#include "tensor/batch_norm.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/test_tensors.h"

namespace ddp {
namespace {

using testing_tensors::ExpectSameBits;
using testing_tensors::Leaf;

struct Case {
  int64_t n, c, out, hw, stride;
  bool residual;
};

struct Outcome {
  Tensor y, gx, gconv, gr, gw, gb, running_mean, running_var;
};

// One forward and backward of the fused op (`fused`) or of Conv2d then BatchNormAddRelu, under bf16
// autocast when `autocast`.
Outcome RunOnce(const Case& k, bool fused, bool autocast, bool training) {
  const int64_t oh = (k.hw + 2 - 3) / k.stride + 1;
  Tensor x = Leaf({k.n, k.c, k.hw, k.hw}, 1, -2.0f, 2.0f);
  Tensor x_in = ContiguousChannelsLast(x);
  Tensor w = Leaf({k.out, k.c, 3, 3}, 2, -0.3f, 0.3f);
  Tensor residual = k.residual ? Leaf({k.n, k.out, oh, oh}, 3, -1.0f, 1.0f) : Tensor();
  Tensor residual_in = k.residual ? ContiguousChannelsLast(residual) : Tensor();
  Tensor weight = Leaf({k.out}, 4, 0.5f, 1.5f), bias = Leaf({k.out}, 5, -0.5f, 0.5f);
  Generator g(6);
  Tensor running_mean = Uniform({k.out}, -0.5f, 0.5f, g), running_var = Uniform({k.out}, 0.5f, 2.0f, g);
  Tensor y;
  {
    AutocastScope scope(autocast);
    if (fused) {
      y = ConvBatchNormAddRelu(x_in, w, k.stride, 1, residual_in, weight, bias, running_mean, running_var,
                               training, 0.1f, 1e-5f);
    } else {
      y = BatchNormAddRelu(Conv2d(x_in, w, Tensor(), k.stride, 1), residual_in, weight, bias, running_mean,
                           running_var, training, 0.1f, 1e-5f);
    }
  }
  Generator gg(7);
  y.Backward(ContiguousChannelsLast(Uniform(y.shape(), -1.0f, 1.0f, gg)));
  return {y.Detach(),    x.grad(),    w.grad(),     k.residual ? residual.grad() : Tensor(),
          weight.grad(), bias.grad(), running_mean, running_var};
}

void ExpectSameOutcome(const Case& k, bool autocast, bool training) {
  const Outcome a = RunOnce(k, true, autocast, training), b = RunOnce(k, false, autocast, training);
  ExpectSameBits(a.y, b.y, "output");
  ExpectSameBits(a.gx, b.gx, "input gradient");
  ExpectSameBits(a.gconv, b.gconv, "convolution weight gradient");
  if (k.residual) ExpectSameBits(a.gr, b.gr, "residual gradient");
  ExpectSameBits(a.gw, b.gw, "BatchNorm weight gradient");
  ExpectSameBits(a.gb, b.gb, "BatchNorm bias gradient");
  ExpectSameBits(a.running_mean, b.running_mean, "running mean");
  ExpectSameBits(a.running_var, b.running_var, "running variance");
}

class ConvBatchNormTest : public ::testing::TestWithParam<Case> {};

TEST_P(ConvBatchNormTest, FusedUnderAutocastIsConvThenBatchNormAddRelu) {
  ExpectSameOutcome(GetParam(), /*autocast=*/true, /*training=*/true);
  // The fused path ran: the convolution's backward took BatchNorm's gradient as its own bf16 operand, not
  // through the copy BatchNormAddRelu attaches for a separate Conv2d (Note [bf16 copies of BatchNorm's
  // input gradient]), which the two ops take once.
  const int64_t before = GetAutocastCacheCounters().gradient_copies;
  RunOnce(GetParam(), true, true, true);
  const int64_t fused = GetAutocastCacheCounters().gradient_copies - before;
  RunOnce(GetParam(), false, true, true);
  EXPECT_EQ(fused, 0);
  EXPECT_EQ(GetAutocastCacheCounters().gradient_copies - before, 1);
}

TEST_P(ConvBatchNormTest, WithoutAutocastIsConvThenBatchNormAddRelu) {
  ExpectSameOutcome(GetParam(), /*autocast=*/false, /*training=*/true);
}

TEST_P(ConvBatchNormTest, EvalModeIsConvThenBatchNormAddRelu) {
  ExpectSameOutcome(GetParam(), /*autocast=*/true, /*training=*/false);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvBatchNormTest,
                         ::testing::Values(Case{3, 64, 64, 16, 1, true},    // AMX one-row kernel
                                           Case{2, 64, 128, 16, 2, false},  // one-row, stride 2
                                           Case{5, 64, 64, 6, 1, true},     // AMX grid kernel
                                           Case{4, 32, 64, 8, 2, false},    // grid, stride 2
                                           Case{2, 1, 64, 10, 1, false},    // a 1-channel input (stem)
                                           Case{2, 3, 32, 9, 1, true}));    // no AMX kernel takes it

TEST(ConvBatchNormDeathTest, BadShapesAreNamed) {
  AutocastScope scope;
  Tensor x = ContiguousChannelsLast(Leaf({2, 32, 8, 8}, 1, -1.0f, 1.0f));
  Tensor w = Leaf({64, 32, 3, 3}, 2, -0.1f, 0.1f);
  Tensor running_mean = Zeros({64}), running_var = Ones({64});
  Tensor wrong_residual = ContiguousChannelsLast(Leaf({2, 64, 4, 4}, 3, -1.0f, 1.0f));
  EXPECT_DEATH(ConvBatchNormAddRelu(x, w, 1, 1, wrong_residual, Tensor(), Tensor(), running_mean, running_var,
                                    true, 0.1f, 1e-5f),
               "residual \\[2, 64, 4, 4\\] does not match the output \\[2, 64, 8, 8\\]");
  Tensor wrong_weight = Leaf({32}, 4, 0.5f, 1.5f);
  EXPECT_DEATH(ConvBatchNormAddRelu(x, w, 1, 1, Tensor(), wrong_weight, Tensor(), running_mean, running_var,
                                    true, 0.1f, 1e-5f),
               "BatchNorm weight \\[32\\] does not match the convolution's 64 output channels");
}

}  // namespace
}  // namespace ddp
