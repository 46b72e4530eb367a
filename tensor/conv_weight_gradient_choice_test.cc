// Note [Float32 weight gradients on im2col without AVX-512] (tensor/conv_onednn.h), with the rule put on
// whatever the CPU by DDP_CONV_WEIGHT_GRAD=im2col in this test's environment (BUILD): which convolutions it
// takes, and that under it a convolution's weight gradient is the im2col kernel's bit for bit while its
// other passes stay the primitives', in both layouts, in float32 and under bf16 autocast on float32
// primitives.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "tensor/conv_onednn.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/factory.h"
#include "tensor/gradcheck.h"
#include "tensor/ops.h"
#include "tensor/test_tensors.h"

namespace ddp {
namespace {

bool RuleForcedOn() {
  const char* env = std::getenv("DDP_CONV_WEIGHT_GRAD");
  return env != nullptr && std::strcmp(env, "im2col") == 0 && std::getenv("DDP_CONV_KERNEL") == nullptr;
}

cpu::ConvGeometry Geometry(int64_t k, int64_t stride) {
  const int64_t o = (10 + 2 * (k / 2) - k) / stride + 1;
  return cpu::ConvGeometry{4, 8, 10, 10, 16, k, k, stride, k / 2, o, o};
}

TEST(ConvWeightGradientChoiceTest, TheRuleTakesSpatialKernelsUnlessAKernelIsForced) {
  if (!RuleForcedOn()) GTEST_SKIP() << "needs DDP_CONV_WEIGHT_GRAD=im2col and no DDP_CONV_KERNEL";
  EXPECT_TRUE(cpu::Float32WeightGradientOnIm2Col(Geometry(3, 1)));
  EXPECT_TRUE(cpu::Float32WeightGradientOnIm2Col(Geometry(3, 2)));
  EXPECT_FALSE(cpu::Float32WeightGradientOnIm2Col(Geometry(1, 1)));
  for (cpu::ConvKernel kernel : {cpu::ConvKernel::kOneDnn, cpu::ConvKernel::kIm2Col}) {
    cpu::SetConvKernel(kernel);
    EXPECT_FALSE(cpu::Float32WeightGradientOnIm2Col(Geometry(3, 1)));
  }
  cpu::SetConvKernel(cpu::ConvKernel::kAuto);
}

// An output gradient exactly representable in bf16.
Tensor FixedGradient(const Shape& shape) {
  std::vector<float> values(NumElements(shape));
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  return FromVector(values, shape);
}

// Conv2d of fixed operands (4x8x10x10 input, 16 3x3 filters, padding 1) forward and backward under `kernel`,
// channels-last or NCHW, in float32 or under bf16 autocast with the bf16 GEMMs on float32 ones.
testing_tensors::ConvGradients ForwardBackward(cpu::ConvKernel kernel, bool channels_last, bool bf16,
                                               int64_t stride) {
  cpu::SetConvKernel(kernel);
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kFloat32);
  const Tensor x0 = UniformLeaf({4, 8, 10, 10}, 500), w0 = UniformLeaf({16, 8, 3, 3}, 501, -0.2f, 0.2f);
  const testing_tensors::ConvGradients result =
      testing_tensors::Conv2dGradients(x0, w0, stride, bf16, channels_last, FixedGradient);
  cpu::SetConvKernel(cpu::ConvKernel::kAuto);
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
  return result;
}

TEST(ConvWeightGradientChoiceTest, WeightGradientIsIm2ColsAndTheOtherPassesThePrimitives) {
  if (!RuleForcedOn()) GTEST_SKIP() << "needs DDP_CONV_WEIGHT_GRAD=im2col and no DDP_CONV_KERNEL";
  for (bool channels_last : {false, true}) {
    for (bool bf16 : {false, true}) {
      for (int64_t stride : {1, 2}) {
        SCOPED_TRACE(::testing::Message()
                     << "channels_last " << channels_last << " bf16 " << bf16 << " stride " << stride);
        const testing_tensors::ConvGradients rule =
            ForwardBackward(cpu::ConvKernel::kAuto, channels_last, bf16, stride);
        const testing_tensors::ConvGradients primitives =
            ForwardBackward(cpu::ConvKernel::kOneDnn, channels_last, bf16, stride);
        const testing_tensors::ConvGradients im2col =
            ForwardBackward(cpu::ConvKernel::kIm2Col, channels_last, bf16, stride);
        EXPECT_EQ(rule.gw, im2col.gw);
        EXPECT_EQ(rule.gx, primitives.gx);
        if (!bf16) EXPECT_EQ(rule.y, primitives.y);
        // In float32 the two weight gradients differ (the order of their sums), so the comparison above
        // could fail; under bf16 these few products of bf16 operands sum exactly in either order.
        if (!bf16) EXPECT_NE(primitives.gw, im2col.gw);
      }
    }
  }
}

}  // namespace
}  // namespace ddp
