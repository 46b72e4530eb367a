// fp16 autocast (Note [fp16 autocast] in tensor/autocast.h): every op on the fp16 path equals its float32
// op on float16-rounded operands, bit for bit, forward and backward (with the output gradient rounded to
// float16); it differs from plain float32; parameters are rounded once per scope; float16's range shows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tensor/autocast.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace ddp {
namespace {

bool BitEqual(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const std::vector<float> va = a.ToVector<float>(), vb = b.ToVector<float>();
  return std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) == 0;
}

Tensor Leaf(const Shape& shape, Generator& g) {
  Tensor t = Uniform(shape, -1.0f, 1.0f, g);
  t.set_requires_grad(true);
  return t;
}

struct Grads {
  Tensor out, gx, gw, gb;
};

// Runs `op(x, w, b)`, then backward of sum(out * c): the output gradient is c.
template <typename Op>
Grads Run(const Op& op, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& c, bool fp16) {
  for (Tensor t : {x, w, b}) t.set_grad(Tensor());
  Tensor out;
  {
    AutocastScope scope(fp16, DType::kFloat16);
    out = op(x, w, b);
  }
  Sum(Mul(out, c)).Backward();
  return {out.Detach(), x.grad(), w.grad(), b.grad()};
}

// The same op in float32 on rounded leaves, with the rounded output gradient: the emulation's definition.
template <typename Op>
Grads Reference(const Op& op, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& c) {
  Tensor xr = RoundToFloat16(x), wr = RoundToFloat16(w), br = b.Detach();
  for (Tensor* t : {&xr, &wr, &br}) t->set_requires_grad(true);
  Tensor out = op(xr, wr, br);
  Sum(Mul(out, RoundToFloat16(c))).Backward();
  return {out.Detach(), xr.grad(), wr.grad(), br.grad()};
}

template <typename Op>
void ExpectEmulation(const char* name, const Op& op, const Tensor& x, const Tensor& w, const Tensor& b,
                     const Tensor& c) {
  const Grads got = Run(op, x, w, b, c, /*fp16=*/true);
  const Grads want = Reference(op, x, w, b, c);
  const Grads plain = Run(op, x, w, b, c, /*fp16=*/false);
  EXPECT_TRUE(BitEqual(got.out, want.out)) << name << " forward";
  EXPECT_TRUE(BitEqual(got.gx, want.gx)) << name << " input gradient";
  EXPECT_TRUE(BitEqual(got.gw, want.gw)) << name << " weight gradient";
  EXPECT_EQ(got.gb.defined(), want.gb.defined()) << name;
  if (want.gb.defined()) {
    EXPECT_TRUE(BitEqual(got.gb, want.gb)) << name << " bias gradient";
  }
  EXPECT_FALSE(BitEqual(got.out, plain.out)) << name << ": fp16 should differ from float32";
  EXPECT_FALSE(BitEqual(got.gw, plain.gw)) << name << ": fp16 weight gradient should differ from float32";
}

TEST(AutocastFp16Test, LinearMatmulConvAndFusedConvEqualFloat32OnRoundedOperands) {
  Generator g(3);
  {
    Tensor x = Leaf({5, 7}, g), w = Leaf({4, 7}, g), b = Leaf({4}, g), c = Uniform({5, 4}, -1, 1, g);
    ExpectEmulation("Linear", [](const Tensor& x, const Tensor& w, const Tensor& b) { return Linear(x, w, b); },
                    x, w, b, c);
    Tensor bm = Leaf({7, 3}, g), cm = Uniform({5, 3}, -1, 1, g);
    ExpectEmulation(
        "Matmul", [](const Tensor& a, const Tensor& m, const Tensor&) { return Matmul(a, m); }, x, bm,
        Leaf({1}, g), cm);
  }
  Tensor x = Leaf({2, 3, 8, 8}, g), w = Leaf({4, 3, 3, 3}, g), b = Leaf({4}, g);
  ExpectEmulation(
      "Conv2d", [](const Tensor& x, const Tensor& w, const Tensor& b) { return Conv2d(x, w, b, 1, 1); }, x, w,
      b, Uniform({2, 4, 8, 8}, -1, 1, g));
  ExpectEmulation(
      "Conv2dReluMaxPool2d",
      [](const Tensor& x, const Tensor& w, const Tensor& b) { return Conv2dReluMaxPool2d(x, w, b, 1, 1, 2); }, x,
      w, b, Uniform({2, 4, 4, 4}, -1, 1, g));
}

TEST(AutocastFp16Test, ParametersAreRoundedOncePerScopeAndScopesNest) {
  Generator g(4);
  Tensor w = Leaf({3, 3}, g), x = Uniform({2, 3}, -1, 1, g);
  const AutocastCacheCounters before = GetAutocastCacheCounters();
  {
    AutocastScope scope(true, DType::kFloat16);
    Tensor y = Linear(Linear(x, w, Tensor()), w, Tensor());
    EXPECT_TRUE(AutocastFp16AppliesTo(x));
    EXPECT_FALSE(AutocastAppliesTo(x)) << "the bf16 path stays off under fp16";
    {
      AutocastScope bf16(true, DType::kBFloat16);
      EXPECT_TRUE(AutocastAppliesTo(x));
      EXPECT_FALSE(AutocastFp16AppliesTo(x));
    }
    EXPECT_TRUE(AutocastFp16AppliesTo(x)) << "the inner scope restored fp16";
  }
  const AutocastCacheCounters after = GetAutocastCacheCounters();
  EXPECT_EQ(after.misses - before.misses, 1);
  EXPECT_EQ(after.hits - before.hits, 1);
  EXPECT_FALSE(AutocastEnabled());
}

// The vectorised rounding gives the scalar conversion's values for every float16 exponent range (normal,
// subnormal, underflow, overflow, ties), both signs.
TEST(AutocastFp16Test, VectorRoundingEqualsScalarConversion) {
  std::vector<float> values;
  Generator g(9);
  for (int e = -30; e <= 17; ++e) {
    for (int k = 0; k < 64; ++k) {
      const float m = 1.0f + static_cast<float>(k) / 64.0f + std::ldexp(1.0f, -11) * (k % 3 == 0);
      values.push_back(std::ldexp(m, e));
      values.push_back(-std::ldexp(m, e));
    }
  }
  const std::vector<float> random = Uniform({4099}, -70000.0f, 70000.0f, g).ToVector<float>();
  values.insert(values.end(), random.begin(), random.end());
  const std::vector<float> got = RoundToFloat16(FromVector(values, {static_cast<int64_t>(values.size())})).ToVector<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    const float want = HalfToFloat(FloatToHalf(values[i]));
    EXPECT_TRUE(std::memcmp(&got[i], &want, sizeof(float)) == 0) << values[i] << ": " << got[i] << " vs " << want;
  }
}

TEST(AutocastFp16Test, Float16RangeAndRounding) {
  // 65504 is float16's largest value; 70000 rounds to inf; 1 + 2^-11 is a tie that goes to even (1);
  // 2^-25 is below float16's smallest subnormal half-way point and flushes to zero.
  const std::vector<float> values = {65504.0f, 70000.0f, 1.0f + std::ldexp(1.0f, -11), std::ldexp(1.0f, -25), -3.0f};
  const std::vector<float> got = RoundToFloat16(FromVector(values, {5})).ToVector<float>();
  EXPECT_EQ(got[0], 65504.0f);
  EXPECT_TRUE(std::isinf(got[1]));
  EXPECT_EQ(got[2], 1.0f);
  EXPECT_EQ(got[3], 0.0f);
  EXPECT_EQ(got[4], -3.0f);
  Tensor big = FromVector(std::vector<float>{1e5f, 1.0f}, {1, 2});
  Tensor w = FromVector(std::vector<float>{1.0f, 1.0f}, {1, 2});
  AutocastScope scope(true, DType::kFloat16);
  EXPECT_TRUE(std::isinf(Linear(big, w, Tensor()).ToVector<float>()[0])) << "an operand beyond 65504 is inf";
}

}  // namespace
}  // namespace ddp
