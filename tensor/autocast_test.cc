// Mixed precision on the tensor floor (Note [Autocast], tensor/autocast.h): the array conversions agree
// with the scalar ones, every autocast op equals the float32 op applied to bf16-rounded operands (forward
// and backward, both GEMM kernels), gradients reach the float32 parameters, casts of parameters are
// cached per outermost scope, and nothing changes outside a scope.
#include "tensor/autocast.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/batch_norm.h"
#include "tensor/bf16_convert.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/factory.h"
#include "tensor/function_node.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST(Bf16ConvertTest, ArraysMatchTheScalarConversionsIncludingEdgeCases) {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -1.5f,
                               3.14159f,
                               1e-40f /* subnormal */,
                               -2.5e-39f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               FromBits(0x7f800001u) /* signalling */,
                               FromBits(0x3f808000u) /* tie, even below */,
                               FromBits(0x3f818000u) /* tie, odd */,
                               FromBits(0x7f7fffffu) /* rounds to inf */,
                               65504.0f};
  Generator g(3);
  // Enough elements for the multi-threaded path, with a ragged tail.
  while (values.size() < (size_t{1} << 18) + 7) values.push_back(g.Normal(0.0f, 100.0f));
  std::vector<BFloat16> low(values.size());
  cpu::FloatToBFloat16Array(values.data(), low.data(), static_cast<int64_t>(values.size()));
  std::vector<float> back(values.size());
  cpu::BFloat16ToFloatArray(low.data(), back.data(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(low[i].bits, FloatToBFloat16(values[i])) << "element " << i << " = " << values[i];
    const float expected = BFloat16ToFloat(low[i].bits);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(back[i])) << i;
    } else {
      ASSERT_EQ(back[i], expected) << i;
    }
  }
}

// x rounded to bf16, as float32, with no history.
Tensor Rounded(const Tensor& x) { return ToDType(ToDType(x.Detach(), DType::kBFloat16), DType::kFloat32); }

// The float32 emulation of an autocast GEMM's roundings: RoundForward rounds an operand and passes its
// gradient through unchanged (the cast's backward); RoundBackward passes values through and rounds the
// gradient that reaches the GEMM's output (the bf16 GEMMs of backward round it).
Tensor RoundForward(const Tensor& x) {
  return RecordOp(Rounded(x), "RoundForward", {&x}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}
Tensor RoundBackward(const Tensor& x) {
  return RecordOp(Clone(x.Detach()), "RoundBackward", {&x},
                  [](const Tensor& g) { return std::vector<Tensor>{Rounded(g)}; });
}

Tensor Leaf(const Tensor& x) {
  Tensor copy = Clone(x.Detach());
  copy.set_requires_grad(true);
  return copy;
}

// The largest |a - b| over max |b|.
double RelativeDifference(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.ToVector<float>(), y = b.ToVector<float>();
  double scale = 1e-30, worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(y[i])));
    worst = std::max(worst, std::abs(static_cast<double>(x[i]) - y[i]));
  }
  return worst / scale;
}

// float32 sums taken in another order (and gradients with some cancellation).
constexpr double kSameOperands = 5e-5;

void ExpectNear(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what;
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  ASSERT_EQ(actual.dtype(), DType::kFloat32) << what;
  EXPECT_LE(RelativeDifference(actual, expected), kSameOperands) << what;
}

// A computation on leaves: (inputs) -> output.
using Op = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs `op` under autocast and `emulation` (float32 ops with RoundForward/RoundBackward where autocast
// rounds) on leaves of `inputs`, seeds both backward passes with `seed`, and compares the outputs and every
// input gradient. `op` in plain float32 must differ from the emulation by far more, so that a missing
// rounding would be seen.
void CheckAgainstEmulation(const Op& op, const Op& emulation, const std::vector<Tensor>& inputs,
                           const Tensor& seed) {
  std::vector<Tensor> mixed, reference, plain;
  for (const Tensor& x : inputs) {
    mixed.push_back(Leaf(x));
    reference.push_back(Leaf(x));
    plain.push_back(Leaf(x));
  }
  Tensor y_mixed;
  {
    AutocastScope autocast;
    y_mixed = op(mixed);
  }
  y_mixed.Backward(seed);
  Tensor y_reference = emulation(reference);
  y_reference.Backward(seed);
  ExpectNear(y_mixed, y_reference, "output");
  for (size_t i = 0; i < inputs.size(); ++i)
    ExpectNear(mixed[i].grad(), reference[i].grad(), "gradient " + std::to_string(i));
  Tensor y_plain = op(plain);
  y_plain.Backward(seed);
  if (y_plain.numel() > 1) {  // a mean loss averages the rounding away; its gradients do not
    EXPECT_GT(RelativeDifference(y_plain, y_reference), 10 * kSameOperands) << "float32 output as close";
  }
  EXPECT_GT(RelativeDifference(plain[0].grad(), reference[0].grad()), 10 * kSameOperands)
      << "float32 gradient as close";
}

// b [c] added to y [n, c, h, w] (or [n, c]) per channel.
Tensor AddChannelBias(const Tensor& y, const Tensor& b) {
  Shape shape(y.dim(), 1);
  shape[1] = b.shape()[0];
  return Add(y, Reshape(b, shape));
}

class AutocastOpsTest : public ::testing::TestWithParam<cpu::Bf16GemmKernel> {
 protected:
  void SetUp() override {
    if (GetParam() == cpu::Bf16GemmKernel::kOneDnn && !cpu::OneDnnBf16MatmulAvailable())
      GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (no AVX-512, or ONEDNN_MAX_CPU_ISA)";
    cpu::SetBf16GemmKernel(GetParam());
  }
  void TearDown() override { cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto); }
};

TEST_P(AutocastOpsTest, LinearWithAndWithoutBias) {
  Generator g(1);
  const Tensor x = Normal({9, 37}, 0, 1, g), w = Normal({13, 37}, 0, 0.3f, g), b = Normal({13}, 0, 1, g);
  const Tensor seed = Normal({9, 13}, 0, 1, g);
  // The bias stays float32: added to the float32 accumulator, its gradient summed from the float32 one.
  CheckAgainstEmulation([](const std::vector<Tensor>& t) { return Linear(t[0], t[1], t[2]); },
                        [](const std::vector<Tensor>& t) {
                          return Add(RoundBackward(Linear(RoundForward(t[0]), RoundForward(t[1]), Tensor())),
                                     t[2]);
                        },
                        {x, w, b}, seed);
  CheckAgainstEmulation([](const std::vector<Tensor>& t) { return Linear(t[0], t[1], Tensor()); },
                        [](const std::vector<Tensor>& t) {
                          return RoundBackward(Linear(RoundForward(t[0]), RoundForward(t[1]), Tensor()));
                        },
                        {x, w}, seed);
}

TEST_P(AutocastOpsTest, MatmulIncludingTransposedViews) {
  Generator g(2);
  const Tensor a = Normal({7, 19}, 0, 1, g), b = Normal({19, 11}, 0, 1, g), seed = Normal({7, 11}, 0, 1, g);
  CheckAgainstEmulation([](const std::vector<Tensor>& t) { return Matmul(t[0], t[1]); },
                        [](const std::vector<Tensor>& t) {
                          return RoundBackward(Matmul(RoundForward(t[0]), RoundForward(t[1])));
                        },
                        {a, b}, seed);
  const Tensor bt = Normal({11, 19}, 0, 1, g);
  CheckAgainstEmulation(
      [](const std::vector<Tensor>& t) { return Matmul(t[0], Transpose(t[1], 0, 1)); },
      [](const std::vector<Tensor>& t) {
        return RoundBackward(Matmul(RoundForward(t[0]), RoundForward(Transpose(t[1], 0, 1))));
      },
      {a, bt}, seed);
}

TEST_P(AutocastOpsTest, Conv2dStridesPaddingAndImageGroups) {
  Generator g(3);
  // 20 images of 6x6 give several images per GEMM group (Note [Conv2d image groups]); 1 image one.
  for (int64_t n : {1, 20}) {
    for (int64_t stride : {1, 2}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " stride=" << stride);
      const Tensor x = Normal({n, 3, 6, 6}, 0, 1, g), w = Normal({5, 3, 3, 3}, 0, 0.3f, g);
      const Tensor b = Normal({5}, 0, 1, g);
      const int64_t out = (6 + 2 - 3) / stride + 1;
      const Tensor seed = Normal({n, 5, out, out}, 0, 1, g);
      CheckAgainstEmulation(
          [stride](const std::vector<Tensor>& t) { return Conv2d(t[0], t[1], t[2], stride, 1); },
          [stride](const std::vector<Tensor>& t) {
            return AddChannelBias(
                RoundBackward(Conv2d(RoundForward(t[0]), RoundForward(t[1]), Tensor(), stride, 1)), t[2]);
          },
          {x, w, b}, seed);
    }
  }
}

TEST_P(AutocastOpsTest, Conv2dReluMaxPool2d) {
  Generator g(4);
  const Tensor x = Normal({12, 2, 8, 8}, 0, 1, g), w = Normal({4, 2, 3, 3}, 0, 0.5f, g),
               b = Normal({4}, 0, 1, g);
  const Tensor seed = Normal({12, 4, 4, 4}, 0, 1, g);
  CheckAgainstEmulation(
      [](const std::vector<Tensor>& t) { return Conv2dReluMaxPool2d(t[0], t[1], t[2], 1, 1, 2); },
      [](const std::vector<Tensor>& t) {
        return MaxPool2d(
            Relu(AddChannelBias(RoundBackward(Conv2d(RoundForward(t[0]), RoundForward(t[1]), Tensor(), 1, 1)),
                                t[2])),
            2);
      },
      {x, w, b}, seed);
}

INSTANTIATE_TEST_SUITE_P(BothKernels, AutocastOpsTest,
                         ::testing::Values(cpu::Bf16GemmKernel::kOneDnn, cpu::Bf16GemmKernel::kFloat32),
                         [](const ::testing::TestParamInfo<cpu::Bf16GemmKernel>& info) {
                           return info.param == cpu::Bf16GemmKernel::kOneDnn ? "OneDnn" : "Float32";
                         });

TEST_P(AutocastOpsTest, GradientsOfAnMlpReachItsFloat32Parameters) {
  Generator g(5);
  const Tensor x = Normal({32, 50}, 0, 1, g);
  std::vector<int64_t> labels;
  for (int i = 0; i < 32; ++i) labels.push_back(static_cast<int64_t>(g.RandomIndex(10)));
  const Tensor target = FromVector(labels, {32});
  const Tensor w1 = Normal({40, 50}, 0, 0.15f, g), b1 = Normal({40}, 0, 0.1f, g),
               w2 = Normal({10, 40}, 0, 0.15f, g);
  // The loss is a scalar: seed 1. Parameters first, so CheckAgainstEmulation's float32 check sees w1.
  CheckAgainstEmulation(
      [&](const std::vector<Tensor>& t) {
        return CrossEntropy(Linear(Relu(Linear(x, t[0], t[1])), t[2], Tensor()), target);
      },
      [&](const std::vector<Tensor>& t) {
        Tensor h = Relu(Add(RoundBackward(Linear(RoundForward(x), RoundForward(t[0]), Tensor())), t[1]));
        return CrossEntropy(RoundBackward(Linear(RoundForward(h), RoundForward(t[2]), Tensor())), target);
      },
      {w1, b1, w2}, Ones({}));
}

TEST(AutocastTest, ParameterCastsAreCachedPerOutermostScopeAndActivationsNeverAre) {
  Generator g(6);
  const Tensor w = Leaf(Normal({8, 8}, 0, 1, g));
  const Tensor x = Normal({4, 8}, 0, 1, g);
  const AutocastCacheCounters before = GetAutocastCacheCounters();
  {
    AutocastScope outer;
    Tensor h = Linear(x, w, Tensor());
    {
      AutocastScope inner;
      h = Linear(h, w, Tensor());  // the cached copy: a hit
    }
    Linear(h, w, Tensor()).Backward(Ones({4, 8}));  // the backward uses the forward's copy: no cast at all
  }
  AutocastCacheCounters after = GetAutocastCacheCounters();
  EXPECT_EQ(after.misses - before.misses, 1);
  EXPECT_EQ(after.hits - before.hits, 2);
  {
    AutocastScope next_step;  // a new outermost scope casts again (the weights may have changed)
    Linear(x, w, Tensor());
  }
  EXPECT_EQ(GetAutocastCacheCounters().misses - after.misses, 1);
}

// Note [Autocast copies from the producer]: BatchNormAddRelu attaches the bits ToBFloat16Contiguous
// gives, a convolution that takes the copy computes what it computes from its own cast, and an in-place
// op on a view of the output makes the next cast round the new values.
TEST(AutocastTest, ProducerCopiesHoldTheCastsBitsUntilAnInPlaceOp) {
  Generator g(8);
  const Tensor x = Leaf(Normal({3, 4, 5, 5}, 0, 1, g)), residual = Normal({3, 4, 5, 5}, 0, 1, g);
  const Tensor weight = Leaf(Normal({4}, 1, 0.1f, g)), bias = Leaf(Normal({4}, 0, 0.1f, g));
  const Tensor w = Leaf(Normal({6, 4, 3, 3}, 0, 0.2f, g));
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
  };
  EXPECT_EQ(BatchNormAddRelu(x, residual, weight, bias, Zeros({4}), Ones({4}), true, 0.1f, 1e-5f)
                .impl()
                ->autocast_copy,
            nullptr);  // no scope, no copy
  AutocastScope autocast;
  for (const Tensor& added : {Tensor(), residual}) {
    const Tensor y = BatchNormAddRelu(x, added, weight, bias, Zeros({4}), Ones({4}), true, 0.1f, 1e-5f);
    ASSERT_NE(y.impl()->autocast_copy, nullptr);
    const Tensor copy(y.impl()->autocast_copy);
    EXPECT_TRUE(same_bits(copy, ToBFloat16Contiguous(y)));
    const AutocastCacheCounters before = GetAutocastCacheCounters();
    EXPECT_TRUE(AutocastCast(y).is_same(copy));
    EXPECT_EQ(GetAutocastCacheCounters().attached - before.attached, 1);
    EXPECT_EQ(Conv2d(y, w, Tensor(), 1, 1).ToVector<float>(),
              Conv2d(y.Detach(), w, Tensor(), 1, 1).ToVector<float>());
  }
  const Tensor y = BatchNormAddRelu(x, Tensor(), weight, bias, Zeros({4}), Ones({4}), true, 0.1f, 1e-5f);
  const Tensor copy(y.impl()->autocast_copy);
  AddInPlace(Reshape(y.Detach(), {3, 100}), Ones({3, 100}));
  const Tensor recast = AutocastCast(y);
  EXPECT_FALSE(recast.is_same(copy));
  EXPECT_TRUE(same_bits(recast, ToBFloat16Contiguous(y)));
  EXPECT_FALSE(same_bits(recast, copy));
}

TEST(AutocastTest, OutsideAScopeAndInADisabledOneOpsStayFloat32Exactly) {
  Generator g(7);
  const Tensor x = Normal({5, 9}, 0, 1, g), w = Normal({4, 9}, 0, 1, g);
  const std::vector<float> plain = Linear(x, w, Tensor()).ToVector<float>();
  EXPECT_FALSE(AutocastEnabled());
  {
    AutocastScope autocast;
    EXPECT_TRUE(AutocastEnabled());
    AutocastScope off(false);
    EXPECT_FALSE(AutocastEnabled());
    EXPECT_EQ(Linear(x, w, Tensor()).ToVector<float>(), plain);
  }
  EXPECT_FALSE(AutocastEnabled());
  EXPECT_EQ(Linear(x, w, Tensor()).ToVector<float>(), plain);
}

TEST(AutocastTest, KernelDescriptionNamesTheActiveKernel) {
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kFloat32);
  EXPECT_NE(cpu::Bf16GemmKernelDescription().find("float32 GEMMs of the bf16-rounded operands"),
            std::string::npos);
  EXPECT_NE(cpu::Bf16GemmKernelDescription().find("; set by the program"), std::string::npos);
  if (cpu::OneDnnBf16MatmulAvailable()) {
    cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn);
    EXPECT_NE(cpu::Bf16GemmKernelDescription().find("oneDNN's bf16 matmul"), std::string::npos);
  } else {
    EXPECT_DEATH(cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn),
                 "SetBf16GemmKernel\\(kOneDnn\\): oneDNN has no bf16 matmul on this CPU");
  }
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
  EXPECT_NE(cpu::ActiveBf16GemmKernel(), cpu::Bf16GemmKernel::kAuto);
  EXPECT_EQ(cpu::Bf16GemmKernelDescription().find("; set by the program"), std::string::npos);
}

// DDP_BF16_GEMM as Bf16GemmKernelFromEnvironment reads it on each call, and the names it uses.
TEST(AutocastTest, EnvironmentPinsAKernelByItsName) {
  const char* original = std::getenv("DDP_BF16_GEMM");
  const std::string saved = original == nullptr ? "" : original;
  const struct {
    const char* value;
    cpu::Bf16GemmKernel kernel;
  } cases[] = {{"onednn", cpu::Bf16GemmKernel::kOneDnn},
               {"fp32", cpu::Bf16GemmKernel::kFloat32},
               {"auto", cpu::Bf16GemmKernel::kAuto},
               {"", cpu::Bf16GemmKernel::kAuto}};
  for (const auto& c : cases) {
    setenv("DDP_BF16_GEMM", c.value, 1);
    EXPECT_EQ(cpu::Bf16GemmKernelFromEnvironment(), c.kernel) << c.value;
  }
  unsetenv("DDP_BF16_GEMM");
  EXPECT_EQ(cpu::Bf16GemmKernelFromEnvironment(), cpu::Bf16GemmKernel::kAuto);
  setenv("DDP_BF16_GEMM", "bf16", 1);
  EXPECT_DEATH(cpu::Bf16GemmKernelFromEnvironment(), "DDP_BF16_GEMM=\"bf16\": expected auto, onednn or fp32");
  if (original == nullptr) {
    unsetenv("DDP_BF16_GEMM");
  } else {
    setenv("DDP_BF16_GEMM", saved.c_str(), 1);
  }
  EXPECT_STREQ(cpu::Bf16GemmKernelName(cpu::Bf16GemmKernel::kOneDnn), "onednn");
  EXPECT_STREQ(cpu::Bf16GemmKernelName(cpu::Bf16GemmKernel::kFloat32), "fp32");
}

// Where kAuto measured the two kernels (a CPU with AVX512_BF16 and no AMX), the description says the
// ratio and the kernel kept is the one the ratio picks (Note [bf16 GEMM kernel choice]).
TEST(AutocastTest, AutomaticChoiceFollowsTheMeasuredRatio) {
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
  const std::string description = cpu::Bf16GemmKernelDescription();
  const std::string marker = "measured here at ";
  const size_t at = description.find(marker);
  if (at == std::string::npos) {
    GTEST_SKIP() << "kAuto measured nothing on this CPU: " << description;
  }
  const double ratio = std::stod(description.substr(at + marker.size()));
  EXPECT_GT(ratio, 0.0);
  EXPECT_EQ(cpu::ActiveBf16GemmKernel(),
            ratio >= cpu::kMinOneDnnSpeedup ? cpu::Bf16GemmKernel::kOneDnn : cpu::Bf16GemmKernel::kFloat32)
      << description;
}

}  // namespace
}  // namespace ddp
