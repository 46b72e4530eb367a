// The rounding functors the CUDA autocast kernels run (tensor/low_precision_round.h) against the CPU's
// conversions, bit for bit: FloatToBFloat16 / FloatToHalf (tensor/dtype.h, built on these functors), the vectorised bf16 array
// conversion (tensor/bf16_convert.h) and the fp16 autocast rounding (RoundToFloat16, F16C where built),
// over every float32 whose low 16 bits are one of the patterns that decide rounding, and at the edges:
// ties to even, NaN, inf, subnormals, float16 overflow.
#include "tensor/low_precision_round.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tensor/autocast.h"
#include "tensor/bf16_convert.h"
#include "tensor/dtype.h"
#include "tensor/factory.h"
#include "tensor/half_convert.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

using functors::BitsToFloat;
using functors::FloatBits;

// Every high half (sign, exponent, top mantissa bits) with low halves at and around both rounding points
// (bit 15 for bf16; bit 12 for normal float16, higher for its subnormals, which the high halves cover).
std::vector<float> RoundingCases() {
  const uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000,
                           0x7fff, 0x8000, 0x8001, 0x9000, 0xefff, 0xf000, 0xffff, 0x5a5a};
  std::vector<float> out;
  out.reserve(65536 * 16);
  for (uint32_t high = 0; high < 65536; ++high) {
    for (uint32_t low : lows) out.push_back(BitsToFloat((high << 16) | low));
  }
  return out;
}

uint16_t HalfBitsOfRounded(float rounded) { return FloatToHalf(rounded); }

TEST(LowPrecisionRoundTest, BFloat16MatchesTheCpuConversionsBitForBit) {
  const std::vector<float> cases = RoundingCases();
  std::vector<BFloat16> array(cases.size());
  cpu::FloatToBFloat16Array(cases.data(), array.data(), static_cast<int64_t>(cases.size()));
  const functors::RoundToBFloat16 round;
  const functors::BFloat16ToFloat32 widen;
  for (size_t i = 0; i < cases.size(); ++i) {
    const uint16_t bits = round(cases[i]);
    ASSERT_EQ(bits, FloatToBFloat16(cases[i])) << "input bits 0x" << std::hex << FloatBits(cases[i]);
    ASSERT_EQ(bits, array[i].bits) << "input bits 0x" << std::hex << FloatBits(cases[i]);
    ASSERT_EQ(FloatBits(widen(bits)), FloatBits(BFloat16ToFloat(bits)));
  }
}

TEST(LowPrecisionRoundTest, HalfMatchesTheCpuConversionsBitForBit) {
  const std::vector<float> cases = RoundingCases();
  // The fp16 autocast rounding (through the float16 array kernels, tensor/half_convert.h).
  const Tensor rounded = RoundToFloat16(FromVector(cases, {static_cast<int64_t>(cases.size())}));
  const std::vector<float> autocast = rounded.ToVector<float>();
  const functors::RoundToHalf round;
  const functors::HalfToFloat32 widen;
  for (size_t i = 0; i < cases.size(); ++i) {
    const uint16_t bits = round(cases[i]);
    ASSERT_EQ(bits, FloatToHalf(cases[i])) << "input bits 0x" << std::hex << FloatBits(cases[i]);
    ASSERT_EQ(FloatBits(widen(bits)), FloatBits(HalfToFloat(bits))) << "half bits 0x" << std::hex << bits;
    ASSERT_EQ(FloatBits(widen(bits)), FloatBits(autocast[i]))
        << "input bits 0x" << std::hex << FloatBits(cases[i]);
    ASSERT_EQ(bits, HalfBitsOfRounded(autocast[i]));  // NaN too: the array kernels give the functors' NaN
  }
}

// The float16 array conversions (F16C with NaN lanes patched, the functors for the tail) against the
// functors: every float16 bit pattern widened (signalling NaNs too), every rounding case rounded, from an
// unaligned start and with a tail of fewer than eight.
TEST(LowPrecisionRoundTest, HalfArraysMatchTheFunctorsBitForBit) {
  std::vector<uint16_t> every(65536 + 1);
  for (uint32_t h = 0; h < 65536; ++h) every[h + 1] = static_cast<uint16_t>(h);
  std::vector<float> wide(every.size());
  cpu::HalfToFloatRun(every.data() + 1, wide.data() + 1, 65536 - 3);
  for (uint32_t h = 0; h < 65536 - 3; ++h) {
    ASSERT_EQ(FloatBits(wide[h + 1]), FloatBits(functors::HalfToFloat32()(static_cast<uint16_t>(h))))
        << "half bits 0x" << std::hex << h;
  }
  const std::vector<float> cases = RoundingCases();
  const int64_t n = static_cast<int64_t>(cases.size()) - 5;
  std::vector<uint16_t> rounded(cases.size());
  cpu::FloatToHalfRun(cases.data() + 1, rounded.data() + 1, n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(rounded[i + 1], functors::RoundToHalf()(cases[i + 1]))
        << "input bits 0x" << std::hex << FloatBits(cases[i + 1]);
  }
}

// ToDType (CopyInPlace between dtypes: DDP's bf16 bucket slots widen into .grad through it) takes the
// vectorised array conversions for float32 <-> bfloat16: the functors' bits both ways, and float16's.
TEST(LowPrecisionRoundTest, ToDTypeMatchesTheFunctorsBitForBit) {
  const std::vector<float> cases = RoundingCases();
  const Tensor x = FromVector(cases, {static_cast<int64_t>(cases.size())});
  for (DType low : {DType::kBFloat16, DType::kFloat16}) {
    const Tensor rounded = ToDType(x, low);
    const Tensor widened = ToDType(rounded, DType::kFloat32);
    const auto* bits = static_cast<const uint16_t*>(rounded.raw_data());
    const float* wide = widened.data<float>();
    for (size_t i = 0; i < cases.size(); ++i) {
      const uint16_t expected =
          low == DType::kBFloat16 ? functors::RoundToBFloat16()(cases[i]) : functors::RoundToHalf()(cases[i]);
      ASSERT_EQ(bits[i], expected) << DTypeName(low) << ", input bits 0x" << std::hex << FloatBits(cases[i]);
      const float back = low == DType::kBFloat16 ? functors::BFloat16ToFloat32()(expected)
                                                 : functors::HalfToFloat32()(expected);
      ASSERT_EQ(FloatBits(wide[i]), FloatBits(back)) << DTypeName(low) << ", bits 0x" << std::hex << expected;
    }
  }
}

TEST(LowPrecisionRoundTest, BFloat16Edges) {
  const functors::RoundToBFloat16 round;
  EXPECT_EQ(round(1.0f), 0x3f80);
  EXPECT_EQ(round(BitsToFloat(0x3f808000u)), 0x3f80);  // tie, even below
  EXPECT_EQ(round(BitsToFloat(0x3f818000u)), 0x3f82);  // tie, even above
  EXPECT_EQ(round(BitsToFloat(0x3f808001u)), 0x3f81);  // just above the tie
  EXPECT_EQ(round(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(round(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(round(BitsToFloat(0x7f800001u)), 0x7fc0);  // signalling NaN with a low payload: quieted, NaN
  EXPECT_EQ(round(BitsToFloat(0xffc00000u)), 0xffc0);
  EXPECT_EQ(round(BitsToFloat(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(round(BitsToFloat(0x00018000u)), 0x0002);  // a subnormal tie, to even
  EXPECT_EQ(round(-0.0f), 0x8000);
}

TEST(LowPrecisionRoundTest, HalfEdges) {
  const functors::RoundToHalf round;
  const functors::HalfToFloat32 widen;
  EXPECT_EQ(round(65504.0f), 0x7bff);
  EXPECT_EQ(round(65519.99f), 0x7bff);  // below the midpoint to 65536
  EXPECT_EQ(round(65520.0f), 0x7c00);   // the midpoint rounds to even: inf
  EXPECT_EQ(round(-1e6f), 0xfc00);
  EXPECT_EQ(round(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(round(std::nanf("")) & 0x7e00, 0x7e00);
  EXPECT_EQ(round(5.9604644775390625e-8f), 0x0001);  // 2^-24, the smallest subnormal
  EXPECT_EQ(round(2.98023223876953125e-8f), 0x0000);  // 2^-25: a tie, to even (zero)
  EXPECT_EQ(round(4.4703483581542969e-8f), 0x0001);  // 1.5 * 2^-25 rounds up
  EXPECT_EQ(round(-0.0f), 0x8000);
  EXPECT_EQ(round(1.0f + 1.0f / 2048), 0x3c00);  // tie between 1 and 1 + 2^-10: even (1)
  EXPECT_EQ(round(1.0f + 3.0f / 2048), 0x3c02);
  EXPECT_EQ(widen(0x0001), 5.9604644775390625e-8f);
  EXPECT_EQ(widen(0x8001), -5.9604644775390625e-8f);
  EXPECT_EQ(widen(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(widen(0xfc00)) && widen(0xfc00) < 0);
}

}  // namespace
}  // namespace ddp
