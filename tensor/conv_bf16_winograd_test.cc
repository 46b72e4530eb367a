// Note [bf16 convolutions on float32 Winograd] (tensor/conv_onednn.h): which bf16 convolutions the rule
// gives to float32 Winograd, and that those compute float32 Winograd's numbers on the bf16-rounded
// operands, forward and both gradients, for NCHW and channels-last activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tensor/autocast.h"
#include "tensor/autograd.h"
#include "tensor/bf16_convert.h"
#include "tensor/conv_onednn.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/factory.h"
#include "tensor/gradcheck.h"
#include "tensor/ops.h"
#include "tensor/test_tensors.h"

namespace ddp {
namespace {

// A 3x3, padding-1 convolution of n images of c channels on side x side maps to `out` channels.
cpu::ConvGeometry Geometry(int64_t n, int64_t c, int64_t side, int64_t out, int64_t stride = 1) {
  const int64_t o = (side + 2 - 3) / stride + 1;
  return cpu::ConvGeometry{n, c, side, side, out, 3, 3, stride, 1, o, o};
}

// Restores the defaults the tests below change, whatever they assert.
struct DefaultKernels {
  ~DefaultKernels() {
    cpu::SetBf16Winograd(cpu::Bf16Winograd::kAuto);
    cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
    cpu::SetConvKernel(cpu::ConvKernel::kAuto);
  }
};

bool SkipForEnvironment() {
  return std::getenv("DDP_CONV_KERNEL") != nullptr || std::getenv("DDP_BF16_CONV_WINOGRAD") != nullptr ||
         std::getenv("DDP_BF16_GEMM") != nullptr;
}

// Where oneDNN's bf16 GEMMs run on AVX512_BF16 without AMX, the rule takes ResNet-18's layer3 on 32x32
// images (8x8 outputs, 256 channels, 256 tiles at batch 64) and nothing that leaves part of a 4x4 tile
// unused, has outputs below 8x8, fewer channels or fewer tiles, or that Winograd does not take; forced, it
// takes every convolution Winograd takes or none. Where the bf16 GEMMs are float32's, every bf16 convolution
// runs the float32 primitives; with AMX the rule takes nothing.
TEST(ConvBf16WinogradTest, RuleTakesWholeTilesOfWideLayers) {
  if (SkipForEnvironment()) GTEST_SKIP() << "a DDP_ variable in the environment forces a kernel";
  DefaultKernels restore;
  const cpu::ConvGeometry layer3 = Geometry(64, 256, 8, 256);
  if (cpu::OneDnnBf16MatmulAvailable()) {
    cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn);
    const bool avx512_bf16 = std::strcmp(cpu::Bf16Instructions(), "avx512_bf16") == 0;
    EXPECT_EQ(cpu::Bf16ConvOnFloat32Primitives(layer3), avx512_bf16) << cpu::Bf16Instructions();
    EXPECT_EQ(cpu::Bf16ConvOnFloat32Primitives(Geometry(16, 256, 16, 256)), avx512_bf16);  // 256 tiles
    EXPECT_FALSE(cpu::Bf16ConvOnFloat32Primitives(Geometry(64, 256, 7, 256)));   // 7x7: tiles partly unused
    EXPECT_FALSE(cpu::Bf16ConvOnFloat32Primitives(Geometry(8, 256, 8, 256)));    // 32 tiles
    EXPECT_FALSE(cpu::Bf16ConvOnFloat32Primitives(Geometry(64, 512, 4, 512)));   // 64 tiles
    EXPECT_FALSE(cpu::Bf16ConvOnFloat32Primitives(Geometry(256, 512, 4, 512)));  // 256 tiles, but 4x4
    EXPECT_FALSE(cpu::Bf16ConvOnFloat32Primitives(Geometry(64, 128, 16, 128)));  // 128 channels
    EXPECT_FALSE(cpu::Bf16ConvOnFloat32Primitives(Geometry(64, 128, 8, 256)));   // 128 input channels
    EXPECT_FALSE(cpu::Bf16ConvOnFloat32Primitives(Geometry(64, 256, 16, 256, 2)));  // stride 2: direct
    cpu::SetBf16Winograd(cpu::Bf16Winograd::kNever);
    EXPECT_FALSE(cpu::Bf16ConvOnFloat32Primitives(layer3));
    cpu::SetBf16Winograd(cpu::Bf16Winograd::kAlways);
    EXPECT_TRUE(cpu::Bf16ConvOnFloat32Primitives(Geometry(64, 64, 28, 64)));
    EXPECT_FALSE(cpu::Bf16ConvOnFloat32Primitives(Geometry(64, 64, 28, 64, 2)));
    cpu::SetBf16Winograd(cpu::Bf16Winograd::kAuto);
    cpu::SetConvKernel(cpu::ConvKernel::kOneDnn);  // the direct primitives everywhere: no Winograd
    EXPECT_FALSE(cpu::Bf16ConvOnFloat32Primitives(layer3));
    cpu::SetConvKernel(cpu::ConvKernel::kAuto);
  }
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kFloat32);
  EXPECT_TRUE(cpu::Bf16ConvOnFloat32Primitives(Geometry(64, 64, 28, 64, 2)));
  EXPECT_TRUE(cpu::Bf16ConvOnFloat32Primitives(layer3));
}

// v rounded to bf16 (as autocast rounds a convolution's operands) and widened back to float32.
Tensor RoundedToBf16(const Tensor& v) {
  std::vector<float> values = v.ToVector<float>();
  std::vector<BFloat16> low(values.size());
  cpu::FloatToBFloat16Array(values.data(), low.data(), static_cast<int64_t>(values.size()));
  cpu::BFloat16ToFloatArray(low.data(), values.data(), static_cast<int64_t>(values.size()));
  return FromVector(values, v.shape());
}

// An output gradient exactly representable in bf16, so that rounding it changes nothing.
Tensor Bf16Gradient(const Shape& shape) {
  std::vector<float> values(NumElements(shape));
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.125f * static_cast<float>(i % 11) - 0.5f;
  return FromVector(values, shape);
}

// The forward and both gradients of Conv2d(x, w) (3x3, padding 1), under bf16 autocast or in float32,
// with the activations channels-last or NCHW.
testing_tensors::ConvGradients RunConv(const Tensor& x0, const Tensor& w0, bool bf16, bool channels_last) {
  return testing_tensors::Conv2dGradients(x0, w0, 1, bf16, channels_last, Bf16Gradient);
}

float MaxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  float scale = 0.0f, diff = 0.0f;
  for (size_t i = 0; i < b.size(); ++i) {
    scale = std::max(scale, std::fabs(b[i]));
    diff = std::max(diff, std::fabs(a[i] - b[i]));
  }
  return diff / scale;
}

// A bf16 convolution the rule (here forced) gives to float32 Winograd computes, bit for bit, float32
// Winograd's forward and gradients of its operands rounded to bf16; and it agrees with the bf16 kernels
// to Winograd's rounding (1e-4 of the largest value; Note [Winograd convolutions]).
TEST(ConvBf16WinogradTest, Float32WinogradOfTheRoundedOperands) {
  if (SkipForEnvironment()) GTEST_SKIP() << "a DDP_ variable in the environment forces a kernel";
  if (!cpu::OneDnnBf16MatmulAvailable())
    GTEST_SKIP() << "oneDNN may not use AVX-512 here (the CPU or ONEDNN_MAX_CPU_ISA): no Winograd kernel";
  DefaultKernels restore;
  const Tensor x = UniformLeaf({4, 32, 8, 8}, 510), w = UniformLeaf({48, 32, 3, 3}, 511, -0.1f, 0.1f);
  ASSERT_NE(cpu::OneDnnConvImplementation(Geometry(4, 32, 8, 48)).find("wino"), std::string::npos);
  const Tensor x_low = RoundedToBf16(x), w_low = RoundedToBf16(w);
  for (bool channels_last : {false, true}) {
    SCOPED_TRACE(channels_last ? "channels-last" : "NCHW");
    const testing_tensors::ConvGradients reference = RunConv(x_low, w_low, false, channels_last);
    cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn);
    cpu::SetBf16Winograd(cpu::Bf16Winograd::kAlways);
    const testing_tensors::ConvGradients winograd = RunConv(x, w, true, channels_last);
    cpu::SetBf16Winograd(cpu::Bf16Winograd::kNever);
    const testing_tensors::ConvGradients bf16_kernels = RunConv(x, w, true, channels_last);
    cpu::SetBf16Winograd(cpu::Bf16Winograd::kAuto);
    EXPECT_EQ(winograd.y, reference.y);
    EXPECT_EQ(winograd.gx, reference.gx);
    EXPECT_EQ(winograd.gw, reference.gw);
    EXPECT_LT(MaxRelativeDifference(winograd.y, bf16_kernels.y), 1e-4f);
    EXPECT_LT(MaxRelativeDifference(winograd.gx, bf16_kernels.gx), 1e-4f);
    EXPECT_LT(MaxRelativeDifference(winograd.gw, bf16_kernels.gw), 1e-4f);
    EXPECT_NE(winograd.y, bf16_kernels.y);  // the two really are different kernels
  }
}

// DDP_BF16_CONV_WINOGRAD takes auto, off or on; anything else stops the process naming the value.
// (The child process runs the test afresh, so the variable is read there for the first time.)
TEST(ConvBf16WinogradDeathTest, UnknownEnvironmentValueIsNamed) {
  if (!cpu::OneDnnBf16MatmulAvailable()) GTEST_SKIP() << "no oneDNN bf16 matmul here: the rule is not asked";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        setenv("DDP_BF16_CONV_WINOGRAD", "always", 1);
        cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn);
        cpu::Bf16ConvOnFloat32Primitives(Geometry(64, 256, 8, 256));
      },
      "DDP_BF16_CONV_WINOGRAD=\"always\": expected auto, off or on");
}

}  // namespace
}  // namespace ddp
