// ReduceInputs (Note [Blocked reduction]) against the pairwise reference, sequential in input order.
#include "comm/reduce_functions.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ddp {
namespace {

// Values that make a float sum depend on the order of additions, so a reordering would show.
std::vector<float> Input(int q, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (q % 2 == 0 ? 1e8f : 1.0f) * static_cast<float>((i * 7 + q * 13) % 11) - 3.5f;
  return v;
}

// The reference: out = in0 op in1, then out = out op in_q, over the whole buffer.
std::vector<float> Pairwise(RawReduceFunction fn, const std::vector<std::vector<float>>& inputs) {
  std::vector<float> out(inputs[0].size());
  fn(out.data(), inputs[0].data(), inputs[1].data(), out.size());
  for (size_t q = 2; q < inputs.size(); ++q) fn(out.data(), out.data(), inputs[q].data(), out.size());
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ReduceInputsTest, MatchesPairwiseBitForBitWithBothOutputs) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kProduct}) {
    const RawReduceFunction fn = GetReduceFunction(DType::kFloat32, op);
    for (int k : {2, 3, 4, 7}) {
      for (size_t n : {size_t{1}, size_t{1023}, size_t{1024}, size_t{1025}, size_t{5000}}) {
        std::vector<std::vector<float>> inputs;
        std::vector<const void*> pointers;
        for (int q = 0; q < k; ++q) inputs.push_back(Input(q, n));
        for (const auto& in : inputs) pointers.push_back(in.data());
        const std::vector<float> expected = Pairwise(fn, inputs);
        std::vector<float> out(n, -1), also(n, -2);
        ReduceInputs(fn, sizeof(float), out.data(), also.data(), pointers.data(), k, n);
        EXPECT_TRUE(SameBits(out, expected)) << "op " << ReduceOpName(op) << ", " << k << " inputs, n " << n;
        EXPECT_TRUE(SameBits(also, expected)) << "second output, " << k << " inputs, n " << n;
      }
    }
  }
}

TEST(ReduceInputsTest, OutputMayBeAnyInput) {
  const RawReduceFunction fn = GetReduceFunction(DType::kFloat32, ReduceOp::kSum);
  const size_t n = 3000;  // several blocks
  for (int k : {2, 4}) {
    for (int aliased = 0; aliased < k; ++aliased) {
      std::vector<std::vector<float>> inputs;
      for (int q = 0; q < k; ++q) inputs.push_back(Input(q, n));
      const std::vector<float> expected = Pairwise(fn, inputs);
      std::vector<const void*> pointers;
      for (const auto& in : inputs) pointers.push_back(in.data());
      ReduceInputs(fn, sizeof(float), inputs[aliased].data(), nullptr, pointers.data(), k, n);
      EXPECT_TRUE(SameBits(inputs[aliased], expected)) << k << " inputs, output = input " << aliased;
    }
    // Both outputs inputs (a pushed slice: this rank's input and a peer's), with and without kAvg.
    for (const bool average : {false, true}) {
      std::vector<std::vector<float>> inputs;
      for (int q = 0; q < k; ++q) inputs.push_back(Input(q, n));
      std::vector<float> expected = Pairwise(fn, inputs);
      if (average) DivideInPlace(expected.data(), DType::kFloat32, n, k);
      std::vector<const void*> pointers;
      for (const auto& in : inputs) pointers.push_back(in.data());
      const FusedDivide divide{DType::kFloat32, k};
      ReduceInputs(fn, sizeof(float), inputs[0].data(), inputs[k - 1].data(), pointers.data(), k, n,
                   average ? &divide : nullptr);
      EXPECT_TRUE(SameBits(inputs[0], expected)) << k << " inputs, average " << average;
      EXPECT_TRUE(SameBits(inputs[k - 1], expected)) << k << " inputs, average " << average;
    }
  }
}

TEST(ReduceInputsTest, SixteenBitFloatsAndInt64) {
  const size_t n = 2500;
  std::vector<std::vector<uint16_t>> halves(3, std::vector<uint16_t>(n));
  for (int q = 0; q < 3; ++q) {
    for (size_t i = 0; i < n; ++i) halves[q][i] = FloatToBFloat16(static_cast<float>((i + q) % 17) * 0.37f);
  }
  const RawReduceFunction bf16 = GetReduceFunction(DType::kBFloat16, ReduceOp::kSum);
  std::vector<uint16_t> expected(n), out(n);
  bf16(expected.data(), halves[0].data(), halves[1].data(), n);
  bf16(expected.data(), expected.data(), halves[2].data(), n);
  const void* pointers[] = {halves[0].data(), halves[1].data(), halves[2].data()};
  ReduceInputs(bf16, sizeof(uint16_t), out.data(), nullptr, pointers, 3, n);
  EXPECT_EQ(out, expected);

  std::vector<int64_t> a(n), b(n), sum(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<int64_t>(i) * 1000003;
    b[i] = -static_cast<int64_t>(i) * 7;
  }
  const void* longs[] = {a.data(), b.data()};
  ReduceInputs(GetReduceFunction(DType::kInt64, ReduceOp::kSum), sizeof(int64_t), sum.data(), nullptr, longs, 2, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], a[i] + b[i]) << "element " << i;
}

// The 16-bit reduce functions and kAvg's 16-bit division against the element-wise definition (widen,
// combine in float32, round once with tensor/dtype.h's conversions), over values that exercise every
// rounding case: ties, NaN, inf, subnormals, overflow past the largest finite value; every op, in place too
// (a NaN result only as a NaN: C++ leaves open which NaN operand a sum or product passes on).
TEST(ReduceFunctionsTest, SixteenBitFloatsMatchTheElementwiseDefinition) {
  std::vector<uint16_t> a, b;
  const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x3f80, 0xbf80, 0x3f81,
                               0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc1, 0x3c00, 0x7bff};
  for (uint16_t x : specials) {
    for (uint16_t y : specials) {
      a.push_back(x);
      b.push_back(y);
    }
  }
  for (uint32_t i = 0; i < 70000; ++i) {  // a spread of bit patterns, with neighbours that tie when added
    a.push_back(static_cast<uint16_t>(i * 2654435761u >> 16));
    b.push_back(static_cast<uint16_t>((i * 2654435761u >> 16) ^ (i & 3)));
  }
  const size_t n = a.size();
  struct Case {
    DType dtype;
    float (*widen)(uint16_t);
    uint16_t (*round)(float);
  };
  for (const Case& c : {Case{DType::kBFloat16, BFloat16ToFloat, FloatToBFloat16},
                        Case{DType::kFloat16, HalfToFloat, FloatToHalf}}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax}) {
      std::vector<uint16_t> out(n), in_place = a;
      const RawReduceFunction fn = GetReduceFunction(c.dtype, op);
      fn(out.data(), a.data(), b.data(), n);
      fn(in_place.data(), in_place.data(), b.data(), n);
      for (size_t i = 0; i < n; ++i) {
        const float x = c.widen(a[i]), y = c.widen(b[i]);
        const float r = op == ReduceOp::kSum       ? x + y
                        : op == ReduceOp::kProduct ? x * y
                        : op == ReduceOp::kMin     ? std::min(x, y)
                                                   : std::max(x, y);
        if (std::isnan(r)) {  // which NaN operand an add or multiply returns is the compiler's choice
          ASSERT_TRUE(std::isnan(c.widen(out[i]))) << DTypeName(c.dtype) << " on 0x" << std::hex << a[i];
        } else {
          ASSERT_EQ(out[i], c.round(r)) << DTypeName(c.dtype) << " op " << static_cast<int>(op) << " on 0x"
                                        << std::hex << a[i] << ", 0x" << b[i];
        }
        ASSERT_EQ(in_place[i], out[i]) << "in place, element " << i;
      }
    }
    for (int divisor : {2, 3}) {
      std::vector<uint16_t> divided = a;
      DivideInPlace(divided.data(), c.dtype, n, divisor);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(divided[i], c.round(c.widen(a[i]) / static_cast<float>(divisor)))
            << DTypeName(c.dtype) << " / " << divisor << " of 0x" << std::hex << a[i];
      }
    }
  }
}

// kAvg fused into the reduction gives the bits of summing and then dividing the whole buffer: every
// input count and world size (powers of two take the reciprocal path), with and without a second output,
// in place, across block boundaries; and int64 keeps floor division.
TEST(ReduceInputsTest, FusedDivisionMatchesDividingAfterwards) {
  const RawReduceFunction fn = GetReduceFunction(DType::kFloat32, ReduceOp::kAvg);
  for (int k : {2, 3, 4}) {
    for (size_t n : {size_t{1}, size_t{1025}, size_t{5000}}) {
      std::vector<std::vector<float>> inputs;
      std::vector<const void*> pointers;
      for (int q = 0; q < k; ++q) inputs.push_back(Input(q, n));
      for (const auto& in : inputs) pointers.push_back(in.data());
      std::vector<float> expected = Pairwise(fn, inputs);
      DivideInPlace(expected.data(), DType::kFloat32, n, k);
      const FusedDivide divide{DType::kFloat32, k};
      std::vector<float> out(n, -1), also(n, -2);
      ReduceInputs(fn, sizeof(float), out.data(), nullptr, pointers.data(), k, n, &divide);
      EXPECT_TRUE(SameBits(out, expected)) << k << " inputs, n " << n;
      std::fill(out.begin(), out.end(), -1.0f);
      ReduceInputs(fn, sizeof(float), out.data(), also.data(), pointers.data(), k, n, &divide);
      EXPECT_TRUE(SameBits(out, expected)) << "first of two outputs, " << k << " inputs, n " << n;
      EXPECT_TRUE(SameBits(also, expected)) << "second output, " << k << " inputs, n " << n;
      ReduceInputs(fn, sizeof(float), inputs[0].data(), nullptr, pointers.data(), k, n, &divide);
      EXPECT_TRUE(SameBits(inputs[0], expected)) << "in place, " << k << " inputs, n " << n;
      for (size_t i = 0; i < n; ++i) {
        float sum = 0;  // the pairwise reference itself, against plain arithmetic
        for (int q = 0; q < k; ++q) sum += Input(q, n)[i];
        ASSERT_EQ(expected[i], sum / static_cast<float>(k)) << "element " << i;
        if (i > 40) break;
      }
    }
  }
  std::vector<int64_t> a = {7, -7, 8, -9}, b = {0, 0, 1, 0}, out(4);
  const void* longs[] = {a.data(), b.data()};
  const FusedDivide by_two{DType::kInt64, 2};
  ReduceInputs(GetReduceFunction(DType::kInt64, ReduceOp::kAvg), sizeof(int64_t), out.data(), nullptr, longs,
               2, 4, &by_two);
  EXPECT_EQ(out, (std::vector<int64_t>{3, -4, 4, -5}));
}

// A power-of-two divisor multiplies by the reciprocal: the same bits as dividing, down to subnormals,
// infinities and NaN.
TEST(DivideInPlaceTest, PowerOfTwoReciprocalIsExact) {
  std::vector<float> values = {1.0f,          3.0f, -7.25f,   1e-45f,       3e-45f, 1.17549435e-38f,
                               3.4028235e38f, 0.0f, -0.0f,    INFINITY, 1e30f / 3.0f, 0.1f};
  for (int divisor : {2, 4, 8, 1024}) {
    std::vector<float> fast = values;
    DivideInPlace(fast.data(), DType::kFloat32, fast.size(), divisor);
    for (size_t i = 0; i < values.size(); ++i) {
      const float expected = values[i] / static_cast<float>(divisor);
      EXPECT_EQ(std::memcmp(&fast[i], &expected, sizeof(float)), 0) << values[i] << " / " << divisor;
    }
  }
  float nan = NAN;
  DivideInPlace(&nan, DType::kFloat32, 1, 2);
  EXPECT_TRUE(std::isnan(nan));
}

}  // namespace
}  // namespace ddp
