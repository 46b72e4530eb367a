// The max-pooling plane kernels against their definitions, bit for bit, on planes of every small size
// (rows of one to twenty windows: whole vector blocks, rows' last blocks that overrun or are masked as
// Note [Pooling rows that overrun] says, scalar tails), with and without ReLU, ties and NaN: the 2x2
// stride-2 forward against the scan-order window maximum, the backward (Note [Pooling gradients window by
// window]) against zeroing the plane and adding each output's gradient at its index, with signed zeros
// and NaN in the gradient; nothing outside the outputs is written.
#include "tensor/pool_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace ddp {
namespace cpu {
namespace {

// gx = 0, then gx[index] += gy for each output whose index has no kNoGradient (the scatter's definition).
std::vector<float> ReferenceBackward(const std::vector<float>& gy, const std::vector<int32_t>& index,
                                     const PoolGeometry& g) {
  std::vector<float> gx(static_cast<size_t>(g.h * g.w), 0.0f);
  for (size_t o = 0; o < gy.size(); ++o) {
    if (index[o] >= 0) gx[static_cast<size_t>(index[o])] += gy[o];
  }
  return gx;
}

uint32_t Bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// A plane with ties (values from a small set), negative values (so ReLU windows win nothing) and, in
// some planes, NaN.
std::vector<float> RandomPlane(int64_t size, bool with_nan, std::mt19937& rng) {
  std::uniform_int_distribution<int> level(-3, 3);
  std::vector<float> x(static_cast<size_t>(size));
  for (float& v : x) v = 0.5f * static_cast<float>(level(rng));
  if (with_nan && size > 2) x[static_cast<size_t>(size / 2)] = std::numeric_limits<float>::quiet_NaN();
  return x;
}

// Gradients with both signed zeros, NaN and ordinary values.
std::vector<float> RandomGradient(int64_t size, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  std::vector<float> gy(static_cast<size_t>(size));
  for (size_t o = 0; o < gy.size(); ++o) {
    gy[o] = o % 7 == 3 ? -0.0f : o % 11 == 5 ? 0.0f : o % 13 == 6 ? std::nanf("") : value(rng);
  }
  return gy;
}

// The forward's definition: each window scanned in row-major order, a value taken when greater than
// the best so far or NaN; with `relu` the best starts at 0 (index: top-left | kNoGradient) and NaN never
// wins.
void ReferenceForward(const std::vector<float>& x, const PoolGeometry& g, bool relu, std::vector<float>* y,
                      std::vector<int32_t>* index) {
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t start = oy * g.stride * g.w + ox * g.stride;
      float best = relu ? 0.0f : -std::numeric_limits<float>::infinity();
      int32_t at = static_cast<int32_t>(start) | (relu ? kNoGradient : 0);
      for (int64_t ki = 0; ki < g.kernel; ++ki) {
        for (int64_t kj = 0; kj < g.kernel; ++kj) {
          const float v = x[static_cast<size_t>(start + ki * g.w + kj)];
          if (v > best || (!relu && std::isnan(v))) {
            best = v;
            at = static_cast<int32_t>(start + ki * g.w + kj);
          }
        }
      }
      (*y)[static_cast<size_t>(oy * g.ow + ox)] = best;
      (*index)[static_cast<size_t>(oy * g.ow + ox)] = at;
    }
  }
}

const int64_t kWidths[] = {2, 3, 4, 5, 7, 8, 9, 10, 14, 15, 16, 17, 23, 28, 33, 40};

TEST(MaxPoolPlaneTest, TwoByTwoMatchesTheDefinitionBitForBit) {
  std::mt19937 rng(11);
  constexpr int64_t kGuard = 24;
  for (int64_t h = 2; h <= 13; ++h) {
    for (int64_t w : kWidths) {
      for (bool relu : {false, true}) {
        const PoolGeometry g = CheckPoolShapes({1, 1, h, w}, 2, 2);
        const std::vector<float> x = RandomPlane(h * w, /*with_nan=*/(h * w) % 4 == 1, rng);
        const size_t outputs = static_cast<size_t>(g.oh * g.ow);
        std::vector<float> expected_y(outputs);
        std::vector<int32_t> expected_index(outputs);
        ReferenceForward(x, g, relu, &expected_y, &expected_index);
        std::vector<float> y(outputs + 2 * kGuard, 777.0f);
        std::vector<int32_t> index(outputs + 2 * kGuard, 777);
        MaxPoolPlane(x.data(), g, relu, y.data() + kGuard, index.data() + kGuard);
        for (size_t o = 0; o < outputs; ++o) {
          ASSERT_EQ(Bits(y[kGuard + o]), Bits(expected_y[o]))
              << "h " << h << " w " << w << " relu " << relu << " output " << o;
          ASSERT_EQ(index[kGuard + o], expected_index[o])
              << "h " << h << " w " << w << " relu " << relu << " output " << o;
        }
        for (size_t i = 0; i < kGuard; ++i) {
          ASSERT_TRUE(y[i] == 777.0f && y[y.size() - 1 - i] == 777.0f) << "h " << h << " w " << w;
          ASSERT_TRUE(index[i] == 777 && index[index.size() - 1 - i] == 777) << "h " << h << " w " << w;
        }
      }
    }
  }
}

TEST(MaxPoolBackwardPlaneTest, TwoByTwoMatchesTheScatterBitForBit) {
  std::mt19937 rng(7);
  constexpr float kGuard = 12345.0f;
  constexpr int64_t kGuardFloats = 40;
  for (int64_t h = 2; h <= 19; ++h) {
    for (int64_t w : kWidths) {
      for (bool relu : {false, true}) {
        const PoolGeometry g = CheckPoolShapes({1, 1, h, w}, 2, 2);
        const std::vector<float> x = RandomPlane(h * w, /*with_nan=*/(h + w) % 3 == 0, rng);
        std::vector<float> y(static_cast<size_t>(g.oh * g.ow));
        std::vector<int32_t> index(y.size());
        MaxPoolPlane(x.data(), g, relu, y.data(), index.data());
        const std::vector<float> gy = RandomGradient(g.oh * g.ow, rng);
        const std::vector<float> expected = ReferenceBackward(gy, index, g);
        // The plane between guards that must survive.
        std::vector<float> buffer(static_cast<size_t>(h * w + 2 * kGuardFloats), kGuard);
        float* gx = buffer.data() + kGuardFloats;
        MaxPoolBackwardPlane(gy.data(), index.data(), g, gx);
        for (int64_t i = 0; i < h * w; ++i) {
          ASSERT_EQ(Bits(gx[i]), Bits(expected[static_cast<size_t>(i)]))
              << "h " << h << " w " << w << " relu " << relu << " at " << i << ": " << gx[i] << " vs "
              << expected[static_cast<size_t>(i)];
        }
        for (int64_t i = 0; i < kGuardFloats; ++i) {
          ASSERT_EQ(buffer[static_cast<size_t>(i)], kGuard)
              << "h " << h << " w " << w << " wrote before the plane";
          ASSERT_EQ(buffer[buffer.size() - 1 - static_cast<size_t>(i)], kGuard)
              << "h " << h << " w " << w << " wrote after the plane";
        }
      }
    }
  }
}

// Stale values in the output plane (a reused scratch buffer) must not survive: every value is written.
TEST(MaxPoolBackwardPlaneTest, TwoByTwoOverwritesEveryValue) {
  const PoolGeometry g = CheckPoolShapes({1, 1, 7, 9}, 2, 2);
  std::vector<float> x(63);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 17) - 8.0f;
  std::vector<float> y(static_cast<size_t>(g.oh * g.ow), 0.0f), gy(y.size(), 1.5f);
  std::vector<int32_t> index(y.size());
  MaxPoolPlane(x.data(), g, /*relu=*/true, y.data(), index.data());
  std::vector<float> gx(63, -99.0f);
  MaxPoolBackwardPlane(gy.data(), index.data(), g, gx.data());
  const std::vector<float> expected = ReferenceBackward(gy, index, g);
  for (size_t i = 0; i < gx.size(); ++i) EXPECT_EQ(gx[i], expected[i]) << "at " << i;
}

// Overlapping windows (3x3 stride 2) keep the scatter's accumulation.
TEST(MaxPoolBackwardPlaneTest, OverlappingWindowsAccumulate) {
  const PoolGeometry g = CheckPoolShapes({1, 1, 5, 5}, 3, 2);
  std::vector<float> x(25, 0.0f);
  x[12] = 4.0f;  // the centre wins all four windows
  std::vector<float> y(4), gy = {1.0f, 2.0f, 3.0f, 4.0f}, gx(25, -1.0f);
  std::vector<int32_t> index(4);
  MaxPoolPlane(x.data(), g, /*relu=*/false, y.data(), index.data());
  MaxPoolBackwardPlane(gy.data(), index.data(), g, gx.data());
  for (int i = 0; i < 25; ++i) EXPECT_EQ(gx[static_cast<size_t>(i)], i == 12 ? 10.0f : 0.0f) << "at " << i;
}

}  // namespace
}  // namespace cpu
}  // namespace ddp
