// Conv2d's CPU kernel choice (Note [Conv2d kernel choice]): the default rule and its override, oneDNN's
// primitives against im2col at a ResNet layer's shape, and both under bf16 autocast.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "tensor/autocast.h"
#include "tensor/autograd.h"
#include "tensor/bf16_convert.h"
#include "tensor/conv_onednn.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/factory.h"
#include "tensor/gradcheck.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

// Whether oneDNN may use AVX-512 (avx512_core) here, which its bf16 matmul, its bf16 convolution primitives
// and its Winograd kernels all need: not on a CPU without AVX-512, nor under ONEDNN_MAX_CPU_ISA=AVX2. The
// bf16 matmul's probe tells.
bool OneDnnMayUseAvx512() { return cpu::OneDnnBf16MatmulAvailable(); }

// An output gradient that does not depend on the output (so both kernels back-propagate the same
// values), exactly representable in bf16.
Tensor FixedGradient(const Shape& shape) {
  std::vector<float> values(NumElements(shape));
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  return FromVector(values, shape);
}

// The default rule: oneDNN's Winograd primitives for 3x3 stride-1 convolutions with 16 or more input
// channels, its direct ones for other spatial kernels with 8 or more, im2col for 1x1 and few-channel ones;
// DDP_CONV_KERNEL and SetConvKernel force one kernel for every shape.
TEST(ConvKernelChoiceTest, DefaultRuleAndOverride) {
  auto geometry = [](int64_t c, int64_t k, int64_t stride = 1) {
    const int64_t o = (14 + 2 * (k / 2) - k) / stride + 1;
    return cpu::ConvGeometry{64, c, 14, 14, 64, k, k, stride, k / 2, o, o};
  };
  if (std::getenv("DDP_CONV_KERNEL") == nullptr) {
    EXPECT_EQ(cpu::ConvKernelFor(geometry(64, 3)), cpu::ConvKernel::kWinograd);
    EXPECT_EQ(cpu::ConvKernelFor(geometry(16, 3)), cpu::ConvKernel::kWinograd);
    EXPECT_EQ(cpu::ConvKernelFor(geometry(64, 3, 2)), cpu::ConvKernel::kOneDnn);
    EXPECT_EQ(cpu::ConvKernelFor(geometry(8, 3)), cpu::ConvKernel::kOneDnn);
    EXPECT_EQ(cpu::ConvKernelFor(geometry(64, 5)), cpu::ConvKernel::kOneDnn);
    EXPECT_EQ(cpu::ConvKernelFor(geometry(1, 3)), cpu::ConvKernel::kIm2Col);
    EXPECT_EQ(cpu::ConvKernelFor(geometry(64, 1)), cpu::ConvKernel::kIm2Col);
    // Note [bf16 weight gradients on im2col]: outputs of at most 64 pixels (7x7 here), not 14x14.
    EXPECT_TRUE(cpu::Bf16WeightGradientOnIm2Col(geometry(64, 3, 2)));
    EXPECT_FALSE(cpu::Bf16WeightGradientOnIm2Col(geometry(64, 3)));
    EXPECT_TRUE(cpu::Bf16ForwardOnIm2Col());  // Note [bf16 forward on im2col]
  }
  cpu::SetConvKernel(cpu::ConvKernel::kIm2Col);
  EXPECT_EQ(cpu::ConvKernelFor(geometry(64, 3)), cpu::ConvKernel::kIm2Col);
  EXPECT_EQ(cpu::OneDnnConvImplementation(geometry(64, 3)), "im2col");
  EXPECT_FALSE(cpu::Bf16WeightGradientOnIm2Col(geometry(64, 3, 2)));  // a forced kernel runs every pass
  cpu::SetConvKernel(cpu::ConvKernel::kOneDnn);
  EXPECT_FALSE(cpu::Bf16WeightGradientOnIm2Col(geometry(64, 3, 2)));
  EXPECT_FALSE(cpu::Bf16ForwardOnIm2Col());
  EXPECT_EQ(cpu::ConvKernelFor(geometry(1, 1)), cpu::ConvKernel::kOneDnn);
  EXPECT_EQ(cpu::OneDnnConvImplementation(geometry(64, 3)).find("wino"), std::string::npos);
  cpu::SetConvKernel(cpu::ConvKernel::kWinograd);
  EXPECT_EQ(cpu::ConvKernelFor(geometry(64, 1)), cpu::ConvKernel::kWinograd);
  // oneDNN has no Winograd kernel for a 1x1 convolution: the direct primitive runs it.
  EXPECT_EQ(cpu::OneDnnConvImplementation(geometry(64, 1)).find("wino"), std::string::npos);
  cpu::SetConvKernel(cpu::ConvKernel::kAuto);
}

// Note [bf16 forward on im2col]: where oneDNN's bf16 primitives run, the default rule's bf16 forward is
// im2col + the bf16 matmul, bit for bit, and the forced primitive gives other bits (its sums run in
// another order), so the comparison tells the two apart.
TEST(ConvKernelChoiceTest, Bf16ForwardRunsOnIm2ColUnderTheDefaultRule) {
  if (std::getenv("DDP_CONV_KERNEL") != nullptr) GTEST_SKIP() << "DDP_CONV_KERNEL forces one kernel";
  if (!OneDnnMayUseAvx512())
    GTEST_SKIP() << "oneDNN may not use AVX-512 here (the CPU or ONEDNN_MAX_CPU_ISA): no bf16 primitives";
  const Tensor x = UniformLeaf({8, 64, 14, 14}, 430), w = UniformLeaf({64, 64, 3, 3}, 431, -0.05f, 0.05f);
  auto forward = [&](cpu::ConvKernel kernel) {
    cpu::SetConvKernel(kernel);
    cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn);
    Tensor y;
    {
      AutocastScope scope(true);
      y = Conv2d(x.Detach(), w.Detach(), Tensor(), 1, 1);
    }
    cpu::SetConvKernel(cpu::ConvKernel::kAuto);
    cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
    return y.ToVector<float>();
  };
  const std::vector<float> im2col = forward(cpu::ConvKernel::kIm2Col);
  EXPECT_EQ(forward(cpu::ConvKernel::kAuto), im2col);
  EXPECT_NE(forward(cpu::ConvKernel::kOneDnn), im2col);
}

// oneDNN's Winograd kernels need AVX-512 (jit_wino_4x3:avx512_core); where the CPU has it, the default
// rule runs them for ResNet's 3x3 stride-1 layers.
TEST(ConvKernelChoiceTest, WinogradRunsWhereTheCpuHasIt) {
  const cpu::ConvGeometry layer1{8, 64, 28, 28, 64, 3, 3, 1, 1, 28, 28};
  if (OneDnnMayUseAvx512()) {
    EXPECT_NE(cpu::OneDnnConvImplementation(layer1).find("wino"), std::string::npos)
        << cpu::OneDnnConvImplementation(layer1);
  } else {
    EXPECT_EQ(cpu::OneDnnConvImplementation(layer1), "winograd_avx2");  // the engine's own
  }
}

// The kernels agree at a ResNet-18 layer's shape (channels as layer2, a small batch and image), forward and
// every gradient: the direct primitives with im2col to float32 rounding (1e-5 of the largest value: only
// the order of the sums differs), Winograd to 1e-4 (its tile transforms round too; Note [Winograd
// convolutions]).
TEST(ConvKernelChoiceTest, OneDnnMatchesIm2ColAtResNetShapes) {
  const Tensor x0 = UniformLeaf({3, 32, 9, 9}, 400), w0 = UniformLeaf({48, 32, 3, 3}, 401, -0.1f, 0.1f);
  const Tensor b0 = UniformLeaf({48}, 402);
  struct Result {
    std::vector<float> y, gx, gw, gb;
  };
  auto run = [&](cpu::ConvKernel kernel, int64_t stride) {
    cpu::SetConvKernel(kernel);
    Tensor x = Clone(x0.Detach()), w = Clone(w0.Detach()), b = Clone(b0.Detach());
    for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
    Tensor y = Conv2d(x, w, b, stride, 1);
    y.Backward(FixedGradient(y.shape()));
    cpu::SetConvKernel(cpu::ConvKernel::kAuto);
    return Result{y.ToVector<float>(), x.grad().ToVector<float>(), w.grad().ToVector<float>(),
                  b.grad().ToVector<float>()};
  };
  auto expect_near = [](const std::vector<float>& a, const std::vector<float>& b, float tolerance,
                        const char* what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    float scale = 0.0f;
    for (float v : b) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tolerance * scale) << what << " " << i;
  };
  for (int64_t stride : {1, 2}) {
    const Result im2col = run(cpu::ConvKernel::kIm2Col, stride);
    for (cpu::ConvKernel kernel :
         {cpu::ConvKernel::kOneDnn, cpu::ConvKernel::kWinograd, cpu::ConvKernel::kWinogradAvx2}) {
      SCOPED_TRACE(::testing::Message() << "stride " << stride << " kernel " << static_cast<int>(kernel));
      const float tolerance = kernel == cpu::ConvKernel::kOneDnn ? 1e-5f : 1e-4f;
      const Result onednn = run(kernel, stride);
      if (kernel == cpu::ConvKernel::kWinograd && stride == 1 && OneDnnMayUseAvx512()) {
        cpu::SetConvKernel(kernel);  // the comparison above ran Winograd, not its direct fallback
        EXPECT_NE(cpu::OneDnnConvImplementation({3, 32, 9, 9, 48, 3, 3, 1, 1, 9, 9}).find("wino"),
                  std::string::npos);
        cpu::SetConvKernel(cpu::ConvKernel::kAuto);
      }
      expect_near(onednn.y, im2col.y, tolerance, "y");
      expect_near(onednn.gx, im2col.gx, tolerance, "gx");
      expect_near(onednn.gw, im2col.gw, tolerance, "gw");
      expect_near(onednn.gb, im2col.gb, tolerance, "gb");
      EXPECT_NE(onednn.gw, std::vector<float>(onednn.gw.size(), 0.0f));
    }
  }
}

// A batch above the forward's chunk (Note [Forward in image chunks], 128 images) runs as chunks through the
// plans of their sizes: every image's output is im2col's, and each chunk's bits are those of a call on
// that chunk alone.
TEST(ConvKernelChoiceTest, ALargeBatchRunsForwardInChunksOfImages) {
  const int64_t n = 300;
  const Tensor x = UniformLeaf({n, 16, 6, 6}, 410).Detach(),
               w = UniformLeaf({8, 16, 3, 3}, 411, -0.2f, 0.2f).Detach();
  const Tensor b = UniformLeaf({8}, 412).Detach();
  cpu::SetConvKernel(cpu::ConvKernel::kIm2Col);
  const std::vector<float> im2col = Conv2d(x, w, b, 1, 1).ToVector<float>();
  for (cpu::ConvKernel kernel : {cpu::ConvKernel::kOneDnn, cpu::ConvKernel::kWinograd}) {
    SCOPED_TRACE(::testing::Message() << "kernel " << static_cast<int>(kernel));
    cpu::SetConvKernel(kernel);
    const std::vector<float> whole = Conv2d(x, w, b, 1, 1).ToVector<float>();
    ASSERT_EQ(whole.size(), im2col.size());
    float scale = 0.0f;
    for (float v : im2col) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(whole[i], im2col[i], 1e-4f * scale) << i;
    // The engine's own Winograd (a CPU without AVX-512) runs no primitive: its GEMMs take a batch's tiles
    // as their rows, and sgemm may sum a row in another order at another row count.
    if (cpu::OneDnnConvImplementation({n, 16, 6, 6, 8, 3, 3, 1, 1, 6, 6}) == "winograd_avx2") continue;
    const int64_t image = 8 * 6 * 6;
    for (const auto& [first, count] : {std::pair<int64_t, int64_t>{0, 128}, {128, 128}, {256, 44}}) {
      const std::vector<float> chunk = Conv2d(Narrow(x, 0, first, count), w, b, 1, 1).ToVector<float>();
      EXPECT_EQ(chunk,
                std::vector<float>(whole.begin() + first * image, whole.begin() + (first + count) * image))
          << "images " << first << "..";
    }
  }
  cpu::SetConvKernel(cpu::ConvKernel::kAuto);
}

// Under bf16 autocast (Note [bf16 operands of oneDNN's convolutions]) oneDNN's convolutions, with bf16
// primitives (the bf16 GEMM kernel kOneDnn) and with float32 primitives on widened operands (kFloat32),
// give im2col's bf16 numbers up to the order of the float32 sums, for Conv2d and the fused op, forced
// and under the default rule (whose 4x4 output puts the weight gradient of the bf16 primitives on im2col:
// Note [bf16 weight gradients on im2col]); plain float32 differs from them by far more.
TEST(ConvKernelChoiceTest, Bf16AutocastMatchesIm2Col) {
  const Tensor x0 = UniformLeaf({4, 16, 8, 8}, 410), w0 = UniformLeaf({24, 16, 3, 3}, 411, -0.2f, 0.2f),
               b0 = UniformLeaf({24}, 412);
  struct Result {
    std::vector<float> y, gx, gw, gb;
  };
  auto run = [&](cpu::ConvKernel kernel, cpu::Bf16GemmKernel gemm, bool autocast, bool fused) {
    cpu::SetConvKernel(kernel);
    cpu::SetBf16GemmKernel(gemm);
    Tensor x = Clone(x0.Detach()), w = Clone(w0.Detach()), b = Clone(b0.Detach());
    for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
    Tensor y;
    {
      AutocastScope scope(autocast);
      y = fused ? Conv2dReluMaxPool2d(x, w, b, 1, 1, 2, 0) : Conv2d(x, w, b, 2, 1);
    }
    y.Backward(FixedGradient(y.shape()));
    cpu::SetConvKernel(cpu::ConvKernel::kAuto);
    cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
    return Result{y.ToVector<float>(), x.grad().ToVector<float>(), w.grad().ToVector<float>(),
                  b.grad().ToVector<float>()};
  };
  // The largest |a - b| over the largest |b|.
  auto relative = [](const std::vector<float>& a, const std::vector<float>& b) {
    float scale = 0.0f, diff = 0.0f;
    for (size_t i = 0; i < b.size(); ++i) {
      scale = std::max(scale, std::fabs(b[i]));
      diff = std::max(diff, std::fabs(a[i] - b[i]));
    }
    return diff / scale;
  };
  for (bool fused : {false, true}) {
    const Result reference = run(cpu::ConvKernel::kIm2Col, cpu::Bf16GemmKernel::kFloat32, true, fused);
    const Result fp32 = run(cpu::ConvKernel::kIm2Col, cpu::Bf16GemmKernel::kFloat32, false, fused);
    EXPECT_GT(relative(fp32.gw, reference.gw), 1e-3f);
    for (cpu::Bf16GemmKernel gemm : {cpu::Bf16GemmKernel::kOneDnn, cpu::Bf16GemmKernel::kFloat32}) {
      if (gemm == cpu::Bf16GemmKernel::kOneDnn && !cpu::OneDnnBf16MatmulAvailable()) continue;
      for (cpu::ConvKernel kernel : {cpu::ConvKernel::kOneDnn, cpu::ConvKernel::kAuto}) {
        SCOPED_TRACE(::testing::Message()
                     << "fused " << fused << " bf16 kernel "
                     << (gemm == cpu::Bf16GemmKernel::kOneDnn ? "onednn" : "fp32") << " conv kernel "
                     << (kernel == cpu::ConvKernel::kAuto ? "auto" : "onednn"));
        const Result onednn = run(kernel, gemm, true, fused);
        EXPECT_LT(relative(onednn.y, reference.y), 2e-5f);
        EXPECT_LT(relative(onednn.gx, reference.gx), 2e-5f);
        EXPECT_LT(relative(onednn.gw, reference.gw), 2e-5f);
        EXPECT_LT(relative(onednn.gb, reference.gb), 2e-5f);
      }
    }
  }
}

}  // namespace
}  // namespace ddp

namespace ddp {
namespace {

// bf16 autocast at ResNet-18's layer shapes: the default rule (on an AMX CPU: bf16 primitives with NHWC
// outputs, the weight gradient on im2col at <= 64 output pixels) and the primitives forced for every pass
// give im2col's bf16 numbers with the float32-GEMM kernel up to the order of the float32 sums, forward and
// every gradient, to 2e-5 of the largest value.
TEST(ConvKernelChoiceTest, Bf16DefaultRuleAtResNetShapes) {
  struct Case {
    int64_t n, c, hw, out, stride, kernel = 3;
  };
  for (const Case& k : {Case{4, 64, 28, 64, 1}, Case{40, 128, 14, 256, 2}, Case{2, 512, 4, 512, 1},
                        Case{64, 64, 28, 128, 2, 1}, Case{64, 1, 28, 64, 1}, Case{64, 64, 28, 64, 1}}) {
    SCOPED_TRACE(::testing::Message() << k.c << "->" << k.out << " at " << k.hw << " stride " << k.stride);
    const Tensor x0 = UniformLeaf({k.n, k.c, k.hw, k.hw}, 420),
                 w0 = UniformLeaf({k.out, k.c, k.kernel, k.kernel}, 421, -0.05f, 0.05f);
    auto run = [&](cpu::ConvKernel kernel, cpu::Bf16GemmKernel gemm) {
      cpu::SetConvKernel(kernel);
      cpu::SetBf16GemmKernel(gemm);
      Tensor x = Clone(x0.Detach()), w = Clone(w0.Detach());
      x.set_requires_grad(true);
      w.set_requires_grad(true);
      Tensor y;
      {
        AutocastScope scope(true);
        y = Conv2d(x, w, Tensor(), k.stride, k.kernel / 2);
      }
      y.Backward(FixedGradient(y.shape()));
      cpu::SetConvKernel(cpu::ConvKernel::kAuto);
      cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
      return std::vector<std::vector<float>>{y.ToVector<float>(), x.grad().ToVector<float>(),
                                             w.grad().ToVector<float>()};
    };
    const auto reference = run(cpu::ConvKernel::kIm2Col, cpu::Bf16GemmKernel::kFloat32);
    for (cpu::ConvKernel kernel : {cpu::ConvKernel::kAuto, cpu::ConvKernel::kOneDnn}) {
      const auto actual = run(kernel, cpu::Bf16GemmKernel::kAuto);
      const char* names[] = {"y", "gx", "gw"};
      for (int t = 0; t < 3; ++t) {
        float scale = 0.0f, diff = 0.0f;
        for (size_t i = 0; i < reference[t].size(); ++i) {
          scale = std::max(scale, std::fabs(reference[t][i]));
          diff = std::max(diff, std::fabs(actual[t][i] - reference[t][i]));
        }
        EXPECT_LT(diff / scale, 2e-5f) << names[t] << " kernel " << static_cast<int>(kernel);
      }
    }
  }
}

// Note [bf16 input gradients as a forward convolution]: off by default; turned on, the rule takes stride-1
// square kernels with padding < the kernel's size and at most 16 output pixels, and where the bf16
// primitives run such an input gradient is bit for bit the bf16 forward convolution of the output gradient
// with the weights transposed and flipped (padding k - 1 - p), and within float32 rounding of im2col's
// input gradient, over kernels, paddings, non-square images and a 1-image batch. At layer4's channels the
// primitive's bits differ from the forward's (its sums run in another order), so there the bit check tells
// the two paths apart.
TEST(ConvKernelChoiceTest, Bf16InputGradientIsTheForwardOfTheFlippedWeights) {
  if (std::getenv("DDP_CONV_KERNEL") != nullptr || std::getenv("DDP_BF16_CONV_INPUT_GRAD") != nullptr)
    GTEST_SKIP() << "the environment sets the rule";
  if (!OneDnnMayUseAvx512())
    GTEST_SKIP() << "oneDNN may not use AVX-512 here (the CPU or ONEDNN_MAX_CPU_ISA): no bf16 primitives";
  const cpu::ConvGeometry layer4{64, 512, 4, 4, 512, 3, 3, 1, 1, 4, 4};
  EXPECT_FALSE(cpu::Bf16InputGradientAsForward(layer4));  // off by default
  cpu::SetBf16InputGradientAsForward(true);
  EXPECT_TRUE(cpu::Bf16InputGradientAsForward(layer4));
  EXPECT_FALSE(cpu::Bf16InputGradientAsForward({64, 256, 7, 7, 256, 3, 3, 1, 1, 7, 7}));  // 49 pixels
  EXPECT_FALSE(cpu::Bf16InputGradientAsForward({64, 256, 7, 7, 512, 3, 3, 2, 1, 4, 4}));  // stride 2
  EXPECT_FALSE(cpu::Bf16InputGradientAsForward({64, 256, 4, 4, 512, 3, 3, 1, 3, 8, 8}));  // padding 3
  cpu::SetConvKernel(cpu::ConvKernel::kOneDnn);
  EXPECT_FALSE(cpu::Bf16InputGradientAsForward(layer4));  // a forced kernel runs every pass
  cpu::SetConvKernel(cpu::ConvKernel::kAuto);

  struct Case {
    int64_t n, c, h, w, out, k, padding;
  };
  for (const Case& k : {Case{2, 512, 4, 4, 512, 3, 1}, Case{2, 64, 4, 4, 256, 3, 1},
                        Case{3, 24, 4, 4, 40, 3, 1}, Case{2, 16, 5, 3, 8, 3, 0}, Case{1, 8, 2, 3, 12, 2, 1},
                        Case{4, 16, 2, 2, 16, 5, 2}, Case{2, 32, 4, 4, 16, 1, 0}}) {
    SCOPED_TRACE(::testing::Message() << k.c << "->" << k.out << " " << k.h << "x" << k.w << " kernel " << k.k
                                      << " padding " << k.padding);
    const Tensor x0 = UniformLeaf({k.n, k.c, k.h, k.w}, 450), w0 = UniformLeaf({k.out, k.c, k.k, k.k}, 451);
    auto input_gradient = [&](cpu::ConvKernel kernel, cpu::Bf16GemmKernel gemm) {
      cpu::SetConvKernel(kernel);
      cpu::SetBf16GemmKernel(gemm);
      Tensor x = Clone(x0.Detach());
      x.set_requires_grad(true);
      Tensor y;
      {
        AutocastScope scope(true);
        y = Conv2d(x, w0.Detach(), Tensor(), 1, k.padding);
      }
      y.Backward(FixedGradient(y.shape()));
      cpu::SetConvKernel(cpu::ConvKernel::kAuto);
      cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
      return x.grad().ToVector<float>();
    };
    const int64_t oh = k.h + 2 * k.padding - k.k + 1, ow = k.w + 2 * k.padding - k.k + 1;
    ASSERT_TRUE(cpu::Bf16InputGradientAsForward({k.n, k.c, k.h, k.w, k.out, k.k, k.k, 1, k.padding, oh, ow}));
    const std::vector<float> gx = input_gradient(cpu::ConvKernel::kAuto, cpu::Bf16GemmKernel::kOneDnn);

    const std::vector<float> w = w0.ToVector<float>();
    const int64_t taps = k.k * k.k;
    std::vector<float> flipped(w.size());
    for (int64_t o = 0; o < k.out; ++o) {
      for (int64_t ci = 0; ci < k.c; ++ci) {
        for (int64_t t = 0; t < taps; ++t)
          flipped[(ci * k.out + o) * taps + t] = w[(o * k.c + ci) * taps + taps - 1 - t];
      }
    }
    cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn);
    Tensor forward;
    {
      AutocastScope scope(true);
      forward = Conv2d(FixedGradient({k.n, k.out, oh, ow}), FromVector(flipped, {k.c, k.out, k.k, k.k}),
                       Tensor(), 1, k.k - 1 - k.padding);
    }
    cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
    EXPECT_EQ(gx, forward.ToVector<float>());

    const std::vector<float> reference =
        input_gradient(cpu::ConvKernel::kIm2Col, cpu::Bf16GemmKernel::kFloat32);
    float scale = 0.0f, diff = 0.0f;
    for (size_t i = 0; i < reference.size(); ++i) {
      scale = std::max(scale, std::fabs(reference[i]));
      diff = std::max(diff, std::fabs(gx[i] - reference[i]));
    }
    EXPECT_LT(diff / scale, 2e-5f);
  }
  cpu::SetBf16InputGradientAsForward(false);
}

// The bf16 primitives' backward from a float32 output gradient, rounded as it moves into their layout,
// gives the bits of rounding it first (FloatToBFloat16Array) and running the bf16 overload, both passes and
// each alone, on NCHW and on channels-last activations. The primitives must take the gradient as NHWC,
// so that the rounding path runs, where oneDNN runs AMX (its choice) and for channels-last activations on
// every CPU with bf16 primitives (Note [bf16 primitives on NHWC activations]).
TEST(ConvKernelChoiceTest, Bf16PrimitivesRoundTheGradientInTheirLayout) {
  if (!OneDnnMayUseAvx512())
    GTEST_SKIP() << "oneDNN may not use AVX-512 here (the CPU or ONEDNN_MAX_CPU_ISA): no bf16 primitives";
  const bool primitives = cpu::ActiveBf16GemmKernel() == cpu::Bf16GemmKernel::kOneDnn;
  const bool amx = cpu::Bf16GemmKernelDescription().find("this CPU has AMX") != std::string::npos;
  bool any_rounded_here = false;
  for (const cpu::ConvGeometry& g :
       {cpu::ConvGeometry{8, 64, 14, 14, 64, 3, 3, 1, 1, 14, 14},
        cpu::ConvGeometry{6, 32, 14, 14, 64, 3, 3, 2, 1, 7, 7},
        cpu::ConvGeometry{8, 64, 14, 14, 64, 3, 3, 1, 1, 14, 14, /*channels_last=*/true},
        cpu::ConvGeometry{6, 32, 14, 14, 64, 3, 3, 2, 1, 7, 7, /*channels_last=*/true}}) {
    SCOPED_TRACE(::testing::Message()
                 << g.c << "->" << g.out << " stride " << g.stride << (g.channels_last ? " NHWC" : " NCHW"));
    auto bf16 = [](const Tensor& t) {
      std::vector<BFloat16> out(t.numel());
      cpu::FloatToBFloat16Array(t.data<float>(), out.data(), t.numel());
      return out;
    };
    const std::vector<BFloat16> x = bf16(UniformLeaf({g.n, g.c, g.h, g.w}, 440));
    const std::vector<BFloat16> w = bf16(UniformLeaf({g.out, g.c, g.kh, g.kw}, 441, -0.05f, 0.05f));
    const Tensor gy = UniformLeaf({g.n, g.out, g.oh, g.ow}, 442);  // not representable in bf16
    const std::vector<BFloat16> gy_rounded = bf16(gy);
    const size_t gx_size = g.n * g.c * g.h * g.w, gw_size = g.out * g.K();
    for (const auto& [want_x, want_w] :
         {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
      std::vector<float> gx(gx_size, -1.0f), gw(gw_size, -1.0f), gx_ref(gx_size, -2.0f),
          gw_ref(gw_size, -2.0f);
      const bool rounded_here =
          cpu::OneDnnConvBackwardRoundingGradient(x.data(), w.data(), gy.data<float>(), g,
                                                  want_x ? gx.data() : nullptr, want_w ? gw.data() : nullptr);
      if (primitives && (amx || g.channels_last)) {
        ASSERT_TRUE(rounded_here) << "the primitives must take this gradient as NHWC";
      }
      if (!rounded_here) continue;  // this CPU's primitives take NCHW gradients blocked (nChw16c)
      any_rounded_here = true;
      ASSERT_TRUE(cpu::OneDnnConvBackward(x.data(), w.data(), gy_rounded.data(), g,
                                          want_x ? gx_ref.data() : nullptr,
                                          want_w ? gw_ref.data() : nullptr));
      if (want_x) {
        EXPECT_EQ(gx, gx_ref);
      }
      if (want_w) {
        EXPECT_EQ(gw, gw_ref);
      }
    }
  }
  if (!any_rounded_here) GTEST_SKIP() << "this CPU's bf16 primitives take no gradient as NHWC";
}

}  // namespace
}  // namespace ddp
