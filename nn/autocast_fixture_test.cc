// bf16 autocast against PyTorch's torch.autocast("cpu", dtype=torch.bfloat16): a Linear, a Conv2d and a
// small CNN with cross-entropy, forward and backward, from tests/fixtures/autocast_*.safetensors
// (tools/gen_fixtures.py; torch 1.13 and 2.15 write the same values). Both bf16 GEMM kernels.
//
// Tolerance: max |ours - torch| <= 1e-2 * max(1, max |torch|) per tensor. Both sides round every GEMM
// operand to bf16 (relative error 2^-9); PyTorch also rounds each autocast output to bf16 and its bias,
// which this engine keeps in float32 (Note [Autocast], tensor/autocast.h), so agreement is at bf16
// precision, not float32's 1e-4. The same comparison of plain float32 against PyTorch's autocast must be
// looser than ours, so the test sees whether bf16 rounding happened at all.
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "nn/layers.h"
#include "nn/safetensors.h"
#include "tensor/autocast.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

constexpr double kTolerance = 1e-2;

std::map<std::string, Tensor> Load(const std::string& file) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const std::string path = (srcdir != nullptr ? std::string(srcdir) + "/ddpengine/" : std::string()) +
                           "tests/fixtures/" + file;
  auto contents = ReadSafetensors(path);
  DDP_CHECK(contents.ok()) << contents.status().ToString() << " (regenerate with tools/gen_fixtures.py)";
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : contents->tensors) out[name] = t;
  return out;
}

// max |actual - expected| / max(1, max |expected|).
double Error(const Tensor& actual, const Tensor& expected) {
  DDP_CHECK(actual.shape() == expected.shape()) << ShapeToString(actual.shape()) << " vs "
                                                << ShapeToString(expected.shape());
  const std::vector<float> a = actual.ToVector<float>(), e = expected.ToVector<float>();
  double scale = 1.0, worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(e[i])));
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - e[i]));
  }
  return worst / scale;
}

Tensor Leaf(const Tensor& t) {
  Tensor copy = Clone(t);
  copy.set_requires_grad(true);
  return copy;
}

std::map<std::string, Tensor> WithPrefix(const std::map<std::string, Tensor>& f, const std::string& prefix) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : f) {
    if (name.rfind(prefix, 0) == 0) out[name.substr(prefix.size())] = t;
  }
  return out;
}

// Forward and backward of `layer` on the fixture's input and grad_output, with or without autocast:
// {"output", "grad.input", "grad.<param>"}.
std::map<std::string, Tensor> RunLayer(Module& layer, const std::map<std::string, Tensor>& f, bool autocast) {
  DDP_CHECK(layer.LoadStateDict(WithPrefix(f, "state.")).ok());
  layer.ZeroGrad();
  Tensor x = Leaf(f.at("input"));
  Tensor y;
  {
    AutocastScope scope(autocast);
    y = layer.Forward(x);
  }
  y.Backward(f.at("grad_output"));
  std::map<std::string, Tensor> out{{"output", y}, {"grad.input", x.grad()}};
  for (const auto& [name, p] : layer.NamedParameters()) out["grad." + name] = p.grad();
  return out;
}

class AutocastFixtureTest : public ::testing::TestWithParam<cpu::Bf16GemmKernel> {
 protected:
  void SetUp() override {
    if (GetParam() == cpu::Bf16GemmKernel::kOneDnn && !cpu::OneDnnBf16MatmulAvailable())
      GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (no AVX-512, or ONEDNN_MAX_CPU_ISA)";
    cpu::SetBf16GemmKernel(GetParam());
  }
  void TearDown() override { cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto); }

  void CheckLayer(Module& layer, const std::string& file) {
    const auto f = Load(file);
    const auto mixed = RunLayer(layer, f, /*autocast=*/true);
    const auto plain = RunLayer(layer, f, /*autocast=*/false);
    for (const auto& [name, ours] : mixed) {
      SCOPED_TRACE(name);
      const double error = Error(ours, f.at(name));
      EXPECT_LE(error, kTolerance);
      if (name == "output") {
        EXPECT_LT(error, Error(plain.at(name), f.at(name))) << "float32 is as close";
      }
    }
  }
};

TEST_P(AutocastFixtureTest, Linear) {
  Generator g(0);
  nn::Linear fc(64, 48, g);
  CheckLayer(fc, "autocast_linear.safetensors");
}

TEST_P(AutocastFixtureTest, Conv2d) {
  Generator g(0);
  nn::Conv2dOptions options;
  options.padding = 1;
  nn::Conv2d conv(3, 8, 3, g, options);
  CheckLayer(conv, "autocast_conv2d.safetensors");
}

TEST_P(AutocastFixtureTest, SmallCnnLossAndParameterGradients) {
  const auto f = Load("autocast_small_cnn.safetensors");
  Tensor cw = Leaf(f.at("state.conv.weight")), cb = Leaf(f.at("state.conv.bias"));
  Tensor fw = Leaf(f.at("state.fc.weight")), fb = Leaf(f.at("state.fc.bias"));
  Tensor logits, loss;
  {
    AutocastScope autocast;
    // The fused op, as the engine's cnn runs it (the same values as Conv2d -> ReLU -> MaxPool2d).
    logits = Linear(Flatten(Conv2dReluMaxPool2d(f.at("input"), cw, cb, 1, 1, 2), 1), fw, fb);
    loss = CrossEntropy(logits, f.at("target"));
  }
  EXPECT_EQ(loss.dtype(), DType::kFloat32);
  loss.Backward();
  EXPECT_LE(Error(logits, f.at("logits")), kTolerance);
  EXPECT_LE(Error(loss, f.at("loss")), kTolerance);
  for (const auto& [name, p] : std::map<std::string, Tensor>{
           {"conv.weight", cw}, {"conv.bias", cb}, {"fc.weight", fw}, {"fc.bias", fb}}) {
    SCOPED_TRACE(name);
    ASSERT_EQ(p.grad().dtype(), DType::kFloat32);
    EXPECT_LE(Error(p.grad(), f.at("grad." + name)), kTolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(BothKernels, AutocastFixtureTest,
                         ::testing::Values(cpu::Bf16GemmKernel::kOneDnn, cpu::Bf16GemmKernel::kFloat32),
                         [](const ::testing::TestParamInfo<cpu::Bf16GemmKernel>& info) {
                           return info.param == cpu::Bf16GemmKernel::kOneDnn ? "OneDnn" : "Float32";
                         });

}  // namespace
}  // namespace ddp
