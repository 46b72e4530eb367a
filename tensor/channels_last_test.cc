// Channels-last activations (Note [Channels-last activations], tensor/memory_format.h): the layout helpers,
// and Conv2d, BatchNorm and BatchNormAddRelu on channels-last inputs against the same ops on the same
// values laid out NCHW, forward and backward, in float32 and under bf16 autocast, for every convolution
// kernel; the outputs and input gradients stay channels-last, and gradients summing over two uses keep it;
// under bf16 autocast a convolution takes the bf16 copy of its output gradient that BatchNorm attached.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "tensor/autocast.h"
#include "tensor/autograd.h"
#include "tensor/batch_norm.h"
#include "tensor/conv_onednn.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/factory.h"
#include "tensor/gradcheck.h"
#include "tensor/memory_format.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

Tensor RandomLeaf(const Shape& shape, uint64_t seed, float low = -1.0f, float high = 1.0f) {
  Generator g(seed);
  Tensor t = Uniform(shape, low, high, g);
  t.set_requires_grad(true);
  return t;
}

// A leaf with x's values laid out channels-last (on purpose: HasChannelsLastStrides).
Tensor ChannelsLastLeaf(const Tensor& x) {
  Tensor t = ContiguousChannelsLast(CloneChannelsLast(x.Detach()));
  t.set_requires_grad(true);
  return t;
}

// Every element of `actual` within `relative` of `expected`'s largest magnitude (compared in logical
// order, whatever the layouts).
void ExpectClose(const Tensor& actual, const Tensor& expected, float relative, const std::string& what) {
  ASSERT_TRUE(actual.defined() && expected.defined()) << what;
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const std::vector<float> a = actual.ToVector<float>(), e = expected.ToVector<float>();
  float scale = 0.0f;
  for (float v : e) scale = std::max(scale, std::fabs(v));
  const float tolerance = relative * std::max(scale, 1e-6f);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], e[i], tolerance) << what << ", element " << i;
  }
}

TEST(MemoryFormatTest, LayoutsAndTheirDetection) {
  EXPECT_EQ(ChannelsLastStrides({2, 3, 4, 5}), (std::vector<int64_t>{60, 1, 15, 3}));
  const Tensor x = RandomLeaf({2, 3, 4, 5}, 1);
  EXPECT_FALSE(IsChannelsLast(x));
  const Tensor cl = ChannelsLastCopy(x);
  EXPECT_TRUE(IsChannelsLast(cl));
  EXPECT_TRUE(HasChannelsLastStrides(cl));
  EXPECT_FALSE(cl.is_contiguous());
  EXPECT_EQ(cl.ToVector<float>(), x.ToVector<float>());  // the same values in logical order
  // One channel: contiguous is also channels-last, but not laid out so on purpose.
  const Tensor one = RandomLeaf({2, 1, 4, 5}, 2);
  EXPECT_TRUE(IsChannelsLast(one));
  EXPECT_FALSE(HasChannelsLastStrides(one));
  const Tensor restrided = ContiguousChannelsLast(one);
  EXPECT_TRUE(HasChannelsLastStrides(restrided));
  EXPECT_EQ(restrided.storage(), one.storage());  // no copy
  // RowsOf / ChannelsLastFromRows share the storage.
  const Tensor rows = RowsOf(cl);
  EXPECT_EQ(rows.shape(), (Shape{40, 3}));
  EXPECT_EQ(rows.storage(), cl.storage());
  EXPECT_EQ(ChannelsLastFromRows(rows, cl.shape()).ToVector<float>(), x.ToVector<float>());
  // bf16 copies keep the layout.
  const Tensor low = ChannelsLastCopy(ToBFloat16Contiguous(x));
  EXPECT_TRUE(HasChannelsLastStrides(low));
  EXPECT_EQ(ToDType(low, DType::kFloat32).ToVector<float>(),
            ToDType(ToBFloat16Contiguous(x), DType::kFloat32).ToVector<float>());
}

TEST(MemoryFormatTest, ContiguousChannelsLastPassesTheGradientThrough) {
  const Tensor x = RandomLeaf({2, 3, 4, 5}, 3), w = RandomLeaf({2, 3, 4, 5}, 4);
  Sum(Mul(ContiguousChannelsLast(x), w.Detach())).Backward();
  ExpectClose(x.grad(), w.Detach(), 0.0f, "gradient");
}

TEST(MemoryFormatDeathTest, RowsOfNeedsAChannelsLastTensor) {
  EXPECT_DEATH(RowsOf(RandomLeaf({2, 3, 4, 5}, 5)), "is not channels-last");
}

// {n, c, h, w, out, k, stride, padding, bias}
struct ConvCase {
  int64_t n, c, h, w, out, k, stride, padding;
  bool bias;
};

// The operands' precision: float32, or bf16 under autocast with the bf16 GEMM kernel forced to oneDNN's
// (its bf16 convolution primitives) or to float32 (oneDNN's float32 primitives on the widened operands,
// as on a CPU without bf16 instructions: Note [bf16 operands of oneDNN's convolutions]).
enum class Operands { kFloat32, kBf16OnBf16Kernels, kBf16OnFloat32Kernels };

// {case, kernel, operands}
class ChannelsLastConvTest
    : public ::testing::TestWithParam<std::tuple<ConvCase, cpu::ConvKernel, Operands>> {
 protected:
  void SetUp() override {
    cpu::SetConvKernel(std::get<1>(GetParam()));
    const Operands operands = std::get<2>(GetParam());
    if (operands == Operands::kBf16OnBf16Kernels && !cpu::OneDnnBf16MatmulAvailable())
      GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (no AVX-512, or ONEDNN_MAX_CPU_ISA)";
    if (operands != Operands::kFloat32) {
      cpu::SetBf16GemmKernel(operands == Operands::kBf16OnBf16Kernels ? cpu::Bf16GemmKernel::kOneDnn
                                                                      : cpu::Bf16GemmKernel::kFloat32);
    }
  }
  void TearDown() override {
    cpu::SetConvKernel(cpu::ConvKernel::kAuto);
    cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
  }
};

TEST_P(ChannelsLastConvTest, MatchesTheNchwConvolutionForwardAndBackward) {
  const ConvCase k = std::get<0>(GetParam());
  const bool bf16 = std::get<2>(GetParam()) != Operands::kFloat32;
  const Tensor x = RandomLeaf({k.n, k.c, k.h, k.w}, 11), w = RandomLeaf({k.out, k.c, k.k, k.k}, 12);
  const Tensor b = k.bias ? RandomLeaf({k.out}, 13) : Tensor();
  const Tensor x_cl = ChannelsLastLeaf(x);
  Tensor y, y_cl;
  {
    AutocastScope autocast(bf16);
    y = Conv2d(x, w, b, k.stride, k.padding);
    y_cl = Conv2d(x_cl, w, b, k.stride, k.padding);
  }
  EXPECT_TRUE(HasChannelsLastStrides(y_cl));
  // bf16: the same rounded operands on both sides, float32 sums in another order.
  const float tolerance = 2e-5f;
  ExpectClose(y_cl, y, tolerance, "output");
  const Tensor gy = RandomLeaf(y.shape(), 14).Detach();
  y.Backward(gy);
  const Tensor w_grad = w.grad().Detach(), b_grad = k.bias ? b.grad().Detach() : Tensor();
  w.set_grad(Tensor());
  if (k.bias) b.set_grad(Tensor());
  y_cl.Backward(ChannelsLastCopy(gy));
  EXPECT_TRUE(HasChannelsLastStrides(x_cl.grad()));
  ExpectClose(x_cl.grad(), x.grad(), bf16 ? 1e-4f : tolerance, "input gradient");
  ExpectClose(w.grad(), w_grad, bf16 ? 1e-4f : tolerance, "weight gradient");
  if (k.bias) ExpectClose(b.grad(), b_grad, tolerance, "bias gradient");
}

// 3x3 stride 1 and 2 (Winograd / direct primitives / im2col by kernel), 1x1 stride 1 (the pointwise rows)
// and stride 2 (downsample), one input channel (ResNet's stem), a 7x7 output (bf16 weight gradient on the
// rows), with and without bias.
INSTANTIATE_TEST_SUITE_P(
    Cases, ChannelsLastConvTest,
    ::testing::Combine(
        ::testing::Values(ConvCase{2, 16, 9, 9, 24, 3, 1, 1, true}, ConvCase{2, 16, 9, 9, 32, 3, 2, 1, false},
                          ConvCase{3, 16, 6, 6, 8, 1, 1, 0, true}, ConvCase{2, 16, 8, 8, 32, 1, 2, 0, false},
                          ConvCase{2, 1, 10, 10, 16, 3, 1, 1, false},
                          ConvCase{4, 32, 7, 7, 32, 3, 1, 1, false}),
        ::testing::Values(cpu::ConvKernel::kAuto, cpu::ConvKernel::kIm2Col, cpu::ConvKernel::kOneDnn),
        ::testing::Values(Operands::kFloat32, Operands::kBf16OnBf16Kernels,
                          Operands::kBf16OnFloat32Kernels)));

// t's values rounded to bf16, as float32.
Tensor RoundedToBf16(const Tensor& t) {
  return ToDType(ToDType(t.Detach(), DType::kBFloat16), DType::kFloat32);
}

// Where the bf16 GEMM kernel is float32 (a CPU without bf16 instructions), a channels-last bf16
// convolution that oneDNN's primitives take runs its float32 primitives on the widened operands: forward
// and every gradient bit for bit those of the float32 channels-last convolution of the rounded operands
// (with an output gradient that bf16 holds exactly, so rounding it changes nothing).
TEST(ChannelsLastConvTest, Bf16OnFloat32KernelsRunsTheFloat32PrimitivesOnRoundedOperands) {
  for (const cpu::ConvKernel kernel : {cpu::ConvKernel::kAuto, cpu::ConvKernel::kOneDnn}) {
    for (const ConvCase& k :
         {ConvCase{2, 16, 9, 9, 24, 3, 1, 1, true}, ConvCase{4, 32, 7, 7, 32, 3, 1, 1, false},
          ConvCase{2, 16, 9, 9, 32, 3, 2, 1, false}}) {
      SCOPED_TRACE(::testing::Message() << "kernel " << static_cast<int>(kernel) << ", " << k.c << "->"
                                        << k.out << " stride " << k.stride);
      cpu::SetConvKernel(kernel);
      cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kFloat32);
      const Tensor x = RandomLeaf({k.n, k.c, k.h, k.w}, 51), w = RandomLeaf({k.out, k.c, k.k, k.k}, 52);
      const Tensor b = k.bias ? RandomLeaf({k.out}, 53) : Tensor();
      const Tensor x_cl = ChannelsLastLeaf(x);
      Tensor y;
      {
        AutocastScope autocast(true);
        y = Conv2d(x_cl, w, b, k.stride, k.padding);
      }
      const Tensor gy = ChannelsLastCopy(RoundedToBf16(RandomLeaf(y.shape(), 54)));
      y.Backward(gy);
      const Tensor x_ref = ChannelsLastLeaf(RoundedToBf16(x)), w_ref = RoundedToBf16(w);
      w_ref.set_requires_grad(true);
      const Tensor b_ref = k.bias ? RandomLeaf({k.out}, 53) : Tensor();
      const Tensor y_ref = Conv2d(x_ref, w_ref, b_ref, k.stride, k.padding);
      y_ref.Backward(gy);
      cpu::SetConvKernel(cpu::ConvKernel::kAuto);
      cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
      EXPECT_EQ(y.ToVector<float>(), y_ref.ToVector<float>());
      EXPECT_EQ(x_cl.grad().ToVector<float>(), x_ref.grad().ToVector<float>());
      EXPECT_EQ(w.grad().ToVector<float>(), w_ref.grad().ToVector<float>());
      if (k.bias) {
        EXPECT_EQ(b.grad().ToVector<float>(), b_ref.grad().ToVector<float>());
      }
    }
  }
}

TEST(ChannelsLastConvTest, GradCheck) {
  // GradCheck perturbs contiguous inputs; the function lays x out channels-last (an identity for the
  // gradient), so the channels-last convolution's backward is what is checked.
  const Tensor x = RandomLeaf({2, 3, 5, 5}, 21);
  const Tensor w = RandomLeaf({4, 3, 3, 3}, 22), b = RandomLeaf({4}, 23);
  EXPECT_EQ(GradCheck(
                [](const std::vector<Tensor>& in) {
                  const Tensor y = Conv2d(ContiguousChannelsLast(in[0]), in[1], in[2], 1, 1);
                  EXPECT_TRUE(HasChannelsLastStrides(y));
                  return y;
                },
                {x, w, b}),
            "");
}

TEST(ChannelsLastConvTest, GradientsOfTwoUsesSumInTheLayout) {
  // x feeds two convolutions; its gradient is their input gradients' sum, channels-last.
  const Tensor x = RandomLeaf({2, 16, 6, 6}, 31), w1 = RandomLeaf({8, 16, 3, 3}, 32),
               w2 = RandomLeaf({8, 16, 1, 1}, 33);
  const Tensor x_cl = ChannelsLastLeaf(x);
  Sum(Add(Conv2d(x, w1, Tensor(), 1, 1), Conv2d(x, w2, Tensor(), 1, 0))).Backward();
  Sum(Add(Conv2d(x_cl, w1, Tensor(), 1, 1), Conv2d(x_cl, w2, Tensor(), 1, 0))).Backward();
  EXPECT_TRUE(HasChannelsLastStrides(x_cl.grad()));
  ExpectClose(x_cl.grad(), x.grad(), 2e-5f, "summed input gradient");
}

TEST(ChannelsLastBatchNormTest, MatchesNchwInTrainingAndEval) {
  for (const bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "eval");
    const Tensor x = RandomLeaf({4, 8, 5, 5}, 41, 1.0f, 3.0f), weight = RandomLeaf({8}, 42),
                 bias = RandomLeaf({8}, 43);
    const Tensor x_cl = ChannelsLastLeaf(x);
    Generator g(44);
    const Tensor mean = Uniform({8}, -0.1f, 0.1f, g), var = Uniform({8}, 0.5f, 1.5f, g);
    const Tensor mean_cl = Clone(mean), var_cl = Clone(var);
    const Tensor y = BatchNorm(x, weight, bias, mean, var, training, 0.1f, 1e-5f);
    const Tensor y_cl = BatchNorm(x_cl, weight, bias, mean_cl, var_cl, training, 0.1f, 1e-5f);
    EXPECT_TRUE(HasChannelsLastStrides(y_cl));
    ExpectClose(y_cl, y, 1e-6f, "output");
    ExpectClose(mean_cl, mean, 1e-6f, "running mean");
    ExpectClose(var_cl, var, 1e-6f, "running var");
    const Tensor gy = RandomLeaf(y.shape(), 45).Detach();
    y.Backward(gy);
    const Tensor w_grad = weight.grad().Detach(), b_grad = bias.grad().Detach();
    weight.set_grad(Tensor());
    bias.set_grad(Tensor());
    y_cl.Backward(ChannelsLastCopy(gy));
    EXPECT_TRUE(HasChannelsLastStrides(x_cl.grad()));
    ExpectClose(x_cl.grad(), x.grad(), 1e-5f, "input gradient");
    ExpectClose(weight.grad(), w_grad, 1e-5f, "weight gradient");
    ExpectClose(bias.grad(), b_grad, 1e-5f, "bias gradient");
  }
}

TEST(ChannelsLastBatchNormTest, AddReluMatchesNchwAndAttachesAChannelsLastCopy) {
  for (const bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "eval");
    const Tensor x = RandomLeaf({4, 8, 5, 5}, 51, 1.0f, 3.0f), residual = RandomLeaf({4, 8, 5, 5}, 52);
    const Tensor weight = RandomLeaf({8}, 53), bias = RandomLeaf({8}, 54);
    const Tensor x_cl = ChannelsLastLeaf(x), residual_cl = ChannelsLastLeaf(residual);
    const Tensor mean = Zeros({8}), var = Ones({8}), mean_cl = Zeros({8}), var_cl = Ones({8});
    Tensor y, y_cl;
    {
      AutocastScope autocast;  // the output's bf16 copy for the next convolution
      y = BatchNormAddRelu(x, residual, weight, bias, mean, var, training, 0.1f, 1e-5f);
      y_cl = BatchNormAddRelu(x_cl, residual_cl, weight, bias, mean_cl, var_cl, training, 0.1f, 1e-5f);
      EXPECT_TRUE(HasChannelsLastStrides(y_cl));
      const int64_t attached = GetAutocastCacheCounters().attached;
      const Tensor copy = AutocastCastChannelsLast(y_cl);
      EXPECT_EQ(GetAutocastCacheCounters().attached, attached + 1);
      EXPECT_TRUE(HasChannelsLastStrides(copy));
      EXPECT_EQ(ToDType(copy, DType::kFloat32).ToVector<float>(),
                ToDType(ToBFloat16Contiguous(y), DType::kFloat32).ToVector<float>());
      // A consumer of contiguous operands does not get the channels-last copy.
      EXPECT_TRUE(AutocastCast(y_cl).is_contiguous());
    }
    ExpectClose(y_cl, y, 1e-6f, "output");
    const Tensor gy = RandomLeaf(y.shape(), 55).Detach();
    y.Backward(gy);
    y_cl.Backward(ChannelsLastCopy(gy));
    ExpectClose(x_cl.grad(), x.grad(), 1e-5f, "input gradient");
    ExpectClose(residual_cl.grad(), residual.grad(), 0.0f, "residual gradient");
  }
}

// Note [bf16 copies of BatchNorm's input gradient]: under bf16 autocast a channels-last convolution's
// backward takes the bf16 copy of its output gradient that BatchNormAddRelu's backward attached, and its
// gradients are bit for bit those of the same graph with an exact x1 in between (whose gradient carries no
// copy, so the convolution rounds it itself).
TEST(ChannelsLastBatchNormTest, ConvolutionTakesTheInputGradientsBf16Copy) {
  const Tensor x = RandomLeaf({4, 32, 6, 6}, 61), w = RandomLeaf({32, 32, 3, 3}, 62, -0.2f, 0.2f);
  const Tensor weight = RandomLeaf({32}, 63, 0.5f, 1.5f), bias = RandomLeaf({32}, 64);
  const Tensor gz = RandomLeaf({4, 32, 6, 6}, 65).Detach();
  std::vector<std::vector<float>> grads[2];
  for (int with_copy = 0; with_copy < 2; ++with_copy) {
    SCOPED_TRACE(with_copy ? "the gradient's copy" : "rounded by the convolution");
    const Tensor x_cl = ChannelsLastLeaf(x), w_leaf = Clone(w.Detach());
    w_leaf.set_requires_grad(true);
    Tensor z;
    {
      AutocastScope autocast;
      Tensor y = Conv2d(x_cl, w_leaf, Tensor(), 1, 1);
      if (!with_copy) y = MulScalar(y, 1.0f);
      z = BatchNormAddRelu(y, Tensor(), weight, bias, Zeros({32}), Ones({32}), true, 0.1f, 1e-5f);
    }
    const int64_t taken = GetAutocastCacheCounters().gradient_copies;
    z.Backward(ChannelsLastCopy(gz));
    EXPECT_EQ(GetAutocastCacheCounters().gradient_copies, taken + with_copy);
    grads[with_copy] = {x_cl.grad().ToVector<float>(), w_leaf.grad().ToVector<float>()};
  }
  EXPECT_EQ(grads[1][0], grads[0][0]) << "input gradient";
  EXPECT_EQ(grads[1][1], grads[0][1]) << "weight gradient";
}

}  // namespace
}  // namespace ddp
