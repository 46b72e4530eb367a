// The batched transposes (float32, bf16, and float32 rounded to bf16) against an element-by-element
// reference, at sizes with and without ragged 8x8 tiles, single rows and columns, the weight shapes of
// the channels-last convolutions, one matrix and batches large enough to run on several threads.
#include "tensor/layout_transpose.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "tensor/bf16_convert.h"
#include "tensor/dtype.h"
#include "tensor/low_precision_round.h"

namespace ddp {
namespace {

template <typename T>
std::vector<T> Reference(const std::vector<T>& src, int64_t batch, int64_t rows, int64_t cols) {
  std::vector<T> dst(src.size());
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t q = 0; q < cols; ++q) dst[(i * cols + q) * rows + r] = src[(i * rows + r) * cols + q];
    }
  }
  return dst;
}

const std::tuple<int64_t, int64_t, int64_t> kShapes[] = {
    {1, 8, 8},    {1, 1, 1},    {2, 3, 5},  {3, 64, 784}, {2, 784, 64}, {4, 13, 9},   {1, 9, 17},
    {64, 64, 49}, {5, 512, 16}, {7, 1, 33}, {6, 40, 1},   {128, 64, 9}, {64, 9, 128}, {3, 16, 24}};

TEST(LayoutTransposeTest, FloatMatchesReferenceBitForBit) {
  std::mt19937 gen(8);
  std::normal_distribution<float> normal;
  for (const auto& [batch, rows, cols] : kShapes) {
    SCOPED_TRACE(::testing::Message() << batch << "x" << rows << "x" << cols);
    std::vector<float> src(batch * rows * cols), dst(src.size(), -1.0f);
    for (float& v : src) v = normal(gen);
    cpu::Transpose32(src.data(), batch, rows, cols, dst.data());
    EXPECT_EQ(dst, Reference(src, batch, rows, cols));
  }
}

// bf16 elements move with their bits (NaN payloads and signed zeros included).
TEST(LayoutTransposeTest, BFloat16MatchesReferenceBitForBit) {
  std::mt19937 gen(10);
  std::uniform_int_distribution<int> bits(0, 0xffff);
  for (const auto& [batch, rows, cols] : kShapes) {
    SCOPED_TRACE(::testing::Message() << batch << "x" << rows << "x" << cols);
    std::vector<BFloat16> src(batch * rows * cols), dst(src.size());
    for (BFloat16& v : src) v.bits = static_cast<uint16_t>(bits(gen));
    for (BFloat16& v : dst) v.bits = 0xdead;
    cpu::Transpose16(src.data(), batch, rows, cols, dst.data());
    const std::vector<BFloat16> expected = Reference(src, batch, rows, cols);
    for (size_t i = 0; i < src.size(); ++i) ASSERT_EQ(dst[i].bits, expected[i].bits) << "element " << i;
  }
}

// The fused transpose + rounding gives the bits of rounding first (FloatToBFloat16Array), then
// transposing, including ties, NaN and values that round up to the next exponent.
TEST(LayoutTransposeTest, ToBFloat16MatchesRoundThenTranspose) {
  std::mt19937 gen(9);
  std::normal_distribution<float> normal;
  const auto from_bits = functors::BitsToFloat;
  // Ties (even below, odd), large and subnormal values, NaN, zeros, one that rounds to inf, a negative
  // and a signalling NaN, one that rounds up to the next exponent, -inf.
  const float specials[] = {1.00390625f,
                            1.01171875f,
                            -3.0e38f,
                            1.0e-40f,
                            std::nanf(""),
                            0.0f,
                            -0.0f,
                            from_bits(0x7f7fffffu),
                            from_bits(0xffc00001u),
                            from_bits(0x7f800001u),
                            from_bits(0x3fffffffu),
                            -std::numeric_limits<float>::infinity()};
  constexpr size_t kSpecials = sizeof(specials) / sizeof(specials[0]);
  for (const auto& [batch, rows, cols] : kShapes) {
    SCOPED_TRACE(::testing::Message() << batch << "x" << rows << "x" << cols);
    std::vector<float> src(batch * rows * cols);
    for (size_t i = 0; i < src.size(); ++i) src[i] = i % 5 == 3 ? specials[i % kSpecials] : normal(gen);
    std::vector<BFloat16> rounded(src.size()), fused(src.size());
    cpu::FloatToBFloat16Array(src.data(), rounded.data(), static_cast<int64_t>(src.size()));
    cpu::TransposeToBFloat16(src.data(), batch, rows, cols, fused.data());
    const std::vector<BFloat16> expected = Reference(rounded, batch, rows, cols);
    for (size_t i = 0; i < src.size(); ++i) ASSERT_EQ(fused[i].bits, expected[i].bits) << "element " << i;
  }
}

// A transpose there and back is the identity.
TEST(LayoutTransposeTest, RoundTrip) {
  std::vector<float> src(64 * 28 * 28 * 2), there(src.size()), back(src.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  cpu::Transpose32(src.data(), 2, 64, 784, there.data());
  cpu::Transpose32(there.data(), 2, 784, 64, back.data());
  EXPECT_EQ(back, src);
}

}  // namespace
}  // namespace ddp
