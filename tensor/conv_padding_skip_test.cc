// The channels-last passes that skip the taps falling in the padding: the tap-by-tap weight gradient
// (tensor/conv_weight_gradient_by_tap.h) and the forward by pixel class
// (tensor/conv_forward_by_pixel_class.h), against their definitions summed in double over geometries with
// padding, strides, non-square images and taps that never read inside; the rule's padded fraction; and the
// channels-last passes with each algorithm forced against the unfolded rows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/conv_channels_last.h"
#include "tensor/conv_forward_by_pixel_class.h"
#include "tensor/conv_onednn.h"
#include "tensor/conv_weight_gradient_by_tap.h"
#include "tensor/threads.h"

namespace ddp {
namespace cpu {
namespace {

ConvGeometry Geometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t out, int64_t kh, int64_t kw,
                      int64_t stride, int64_t padding) {
  ConvGeometry g{n, c, h, w, out, kh, kw, stride, padding, 0, 0, true};
  g.oh = (h + 2 * padding - kh) / stride + 1;
  g.ow = (w + 2 * padding - kw) / stride + 1;
  return g;
}

// Values exactly representable in bf16 (8 significant bits), so both overloads see the same operands.
std::vector<float> Bf16Exact(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> mantissa(-127, 127), exponent(-3, 1);
  std::vector<float> v(n);
  for (float& e : v) e = std::ldexp(static_cast<float>(mantissa(gen)), exponent(gen) - 7);
  return v;
}

std::vector<BFloat16> ToBf16(const std::vector<float>& v) {
  std::vector<BFloat16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i].bits = FloatToBFloat16(v[i]);
  return out;
}

// The definition: taps_first[o][(ky * kw + kx) * c + ch] = Σ over images and output pixels whose input
// pixel lies inside of gy[pixel][o] * x[input pixel][ch], in double.
std::vector<double> Reference(const std::vector<float>& x, const std::vector<float>& gy,
                              const ConvGeometry& g) {
  std::vector<double> gw(g.out * g.K(), 0.0);
  for (int64_t i = 0; i < g.n; ++i) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t iy = oy * g.stride - g.padding + ky, ix = ox * g.stride - g.padding + kx;
            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
            const float* grad = &gy[((i * g.oh + oy) * g.ow + ox) * g.out];
            const float* pixel = &x[((i * g.h + iy) * g.w + ix) * g.c];
            for (int64_t o = 0; o < g.out; ++o) {
              for (int64_t ch = 0; ch < g.c; ++ch) {
                gw[o * g.K() + (ky * g.kw + kx) * g.c + ch] += static_cast<double>(grad[o]) * pixel[ch];
              }
            }
          }
        }
      }
    }
  }
  return gw;
}

// Tolerance for float32 sums of `terms` products of magnitude <= 4 (the operands' range).
double Tolerance(const ConvGeometry& g) { return 1e-6 * 16.0 * static_cast<double>(g.n * g.P()) + 1e-6; }

const ConvGeometry kGeometries[] = {
    Geometry(3, 5, 4, 4, 7, 3, 3, 1, 1),  // layer4-like: 31% padding
    Geometry(2, 4, 7, 5, 3, 3, 3, 1, 1),  // non-square
    Geometry(2, 3, 7, 7, 4, 3, 3, 2, 1),  // stride 2 (layer4a-like)
    Geometry(2, 3, 6, 6, 2, 5, 5, 1, 2),  // 5x5, padding 2
    Geometry(2, 2, 2, 2, 3, 3, 3, 2, 1),  // 1x1 output: tap (0, .) and (., 0) never inside
    Geometry(2, 6, 5, 5, 4, 1, 1, 2, 0),  // 1x1 stride 2: every tap inside, the gradient taken as it lies
    Geometry(1, 3, 3, 4, 2, 2, 3, 1, 0),  // no padding, rectangular kernel
    Geometry(0, 3, 4, 4, 2, 3, 3, 1, 1),  // no images: zero gradient
};

TEST(ConvWeightGradientByTapTest, Float32MatchesTheDefinition) {
  for (const ConvGeometry& g : kGeometries) {
    const std::vector<float> x = Bf16Exact(g.n * g.h * g.w * g.c, 1), gy = Bf16Exact(g.n * g.P() * g.out, 2);
    std::vector<float> gw(g.out * g.K(), -1.0f);
    WeightGradientByTap(x.data(), gy.data(), g, gw.data());
    const std::vector<double> expected = Reference(x, gy, g);
    for (size_t e = 0; e < gw.size(); ++e) {
      ASSERT_NEAR(gw[e], expected[e], Tolerance(g)) << "element " << e << " of c " << g.c << " h " << g.h
                                                    << " k " << g.kh << "x" << g.kw << " stride " << g.stride;
    }
  }
}

TEST(ConvWeightGradientByTapTest, Bf16MatchesTheDefinition) {
  for (const ConvGeometry& g : kGeometries) {
    const std::vector<float> x = Bf16Exact(g.n * g.h * g.w * g.c, 3), gy = Bf16Exact(g.n * g.P() * g.out, 4);
    std::vector<float> gw(g.out * g.K(), -1.0f);
    WeightGradientByTap(ToBf16(x).data(), ToBf16(gy).data(), g, gw.data());
    const std::vector<double> expected = Reference(x, gy, g);
    for (size_t e = 0; e < gw.size(); ++e) {
      ASSERT_NEAR(gw[e], expected[e], Tolerance(g)) << "element " << e << " of c " << g.c << " h " << g.h
                                                    << " k " << g.kh << "x" << g.kw << " stride " << g.stride;
    }
  }
}

TEST(ConvWeightGradientByTapTest, PaddedTapFraction) {
  // 3x3, padding 1: on 4x4 outputs 44 of 144 (pixel, tap) pairs read padding; on 7x7 1 - (19/21)^2.
  EXPECT_DOUBLE_EQ(PaddedTapFraction(Geometry(1, 1, 4, 4, 1, 3, 3, 1, 1)), 44.0 / 144.0);
  EXPECT_NEAR(PaddedTapFraction(Geometry(1, 1, 7, 7, 1, 3, 3, 1, 1)), 1.0 - (19.0 * 19.0) / (21.0 * 21.0),
              1e-12);
  // ResNet-18's stride-2 3x3 into layer4 (7x7 -> 4x4): 10 of 12 rows per axis inside.
  EXPECT_NEAR(PaddedTapFraction(Geometry(1, 1, 7, 7, 1, 3, 3, 2, 1)), 1.0 - 100.0 / 144.0, 1e-12);
  EXPECT_EQ(PaddedTapFraction(Geometry(1, 1, 7, 7, 1, 1, 1, 2, 0)), 0.0);
  EXPECT_EQ(PaddedTapFraction(Geometry(1, 1, 6, 6, 1, 3, 3, 1, 0)), 0.0);
}

TEST(ConvWeightGradientByTapTest, RuleAndOverrides) {
  const ConvGeometry layer4 = Geometry(64, 512, 4, 4, 512, 3, 3, 1, 1);    // 31% padding
  const ConvGeometry layer3 = Geometry(64, 256, 7, 7, 256, 3, 3, 1, 1);    // 18%
  const ConvGeometry layer2 = Geometry(64, 128, 14, 14, 128, 3, 3, 1, 1);  // 9%
  EXPECT_TRUE(WeightGradientByTapApplies(layer4, false));
  EXPECT_FALSE(WeightGradientByTapApplies(layer4, true));  // GEMMs on AMX tiles keep the unfolded rows
  EXPECT_TRUE(WeightGradientByTapApplies(layer3, false));
  EXPECT_FALSE(WeightGradientByTapApplies(layer2, false));
  SetWeightGradientAlgorithm(WeightGradientAlgorithm::kRows);
  EXPECT_FALSE(WeightGradientByTapApplies(layer4, false));
  SetWeightGradientAlgorithm(WeightGradientAlgorithm::kTaps);
  EXPECT_TRUE(WeightGradientByTapApplies(layer2, false));
  SetWeightGradientAlgorithm(WeightGradientAlgorithm::kAuto);
}

// The channels-last backward pass on im2col gives the same weight gradient, [out, c, kh, kw], with either
// algorithm.
TEST(ConvWeightGradientByTapTest, ChannelsLastBackwardAgreesWithTheUnfoldedRows) {
  SetConvKernel(ConvKernel::kIm2Col);
  for (const ConvGeometry& g : kGeometries) {
    if (g.n == 0) continue;
    const std::vector<float> x = Bf16Exact(g.n * g.h * g.w * g.c, 5), gy = Bf16Exact(g.n * g.P() * g.out, 6);
    const std::vector<float> w = Bf16Exact(g.out * g.K(), 7);
    const std::vector<BFloat16> x16 = ToBf16(x), w16 = ToBf16(w);
    std::vector<float> by_rows(g.out * g.K()), by_taps(g.out * g.K()), by_rows16(g.out * g.K()),
        by_taps16(g.out * g.K());
    const auto run = [&](WeightGradientAlgorithm algorithm, std::vector<float>& gw,
                         std::vector<float>& gw16) {
      SetWeightGradientAlgorithm(algorithm);
      ConvBackwardChannelsLast(x.data(), w.data(), gy.data(), g, ConvGrads{nullptr, gw.data(), nullptr});
      ConvBackwardChannelsLast(x16.data(), w16.data(), gy.data(), nullptr, g,
                               ConvGrads{nullptr, gw16.data(), nullptr});
    };
    run(WeightGradientAlgorithm::kRows, by_rows, by_rows16);
    run(WeightGradientAlgorithm::kTaps, by_taps, by_taps16);
    SetWeightGradientAlgorithm(WeightGradientAlgorithm::kAuto);
    for (size_t e = 0; e < by_rows.size(); ++e) {
      ASSERT_NEAR(by_taps[e], by_rows[e], Tolerance(g)) << "float32 element " << e << " of c " << g.c;
      ASSERT_NEAR(by_taps16[e], by_rows16[e], Tolerance(g)) << "bf16 element " << e << " of c " << g.c;
    }
  }
  SetConvKernel(ConvKernel::kAuto);
}

// The definition: y[pixel][o] = b[o] + Σ over the taps whose input pixel lies inside of
// Σ_ch x[input pixel][ch] * w[o][(ky * kw + kx) * c + ch], in double (w taps first).
std::vector<double> ForwardReference(const std::vector<float>& x, const std::vector<float>& w,
                                     const std::vector<float>& b, const ConvGeometry& g) {
  std::vector<double> y(g.n * g.P() * g.out, 0.0);
  for (int64_t i = 0; i < g.n; ++i) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        double* out = &y[((i * g.oh + oy) * g.ow + ox) * g.out];
        for (int64_t o = 0; o < g.out; ++o) out[o] = b.empty() ? 0.0 : b[o];
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t iy = oy * g.stride - g.padding + ky, ix = ox * g.stride - g.padding + kx;
            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
            const float* pixel = &x[((i * g.h + iy) * g.w + ix) * g.c];
            for (int64_t o = 0; o < g.out; ++o) {
              for (int64_t ch = 0; ch < g.c; ++ch) {
                out[o] += static_cast<double>(pixel[ch]) * w[o * g.K() + (ky * g.kw + kx) * g.c + ch];
              }
            }
          }
        }
      }
    }
  }
  return y;
}

// Tolerance for the forward's float32 sums of K() products of magnitude <= 4.
double ForwardTolerance(const ConvGeometry& g) { return 1e-6 * 16.0 * static_cast<double>(g.K()) + 1e-6; }

TEST(ConvForwardByPixelClassTest, MatchesTheDefinition) {
  for (const ConvGeometry& g : kGeometries) {
    for (const bool bias : {false, true}) {
      const std::vector<float> x = Bf16Exact(g.n * g.h * g.w * g.c, 8), w = Bf16Exact(g.out * g.K(), 9);
      const std::vector<float> b = bias ? Bf16Exact(g.out, 10) : std::vector<float>();
      const std::vector<double> expected = ForwardReference(x, w, b, g);
      std::vector<float> y(expected.size(), -1.0f), y16(expected.size(), -1.0f);
      ForwardByPixelClass(x.data(), w.data(), bias ? b.data() : nullptr, g, y.data());
      ForwardByPixelClass(ToBf16(x).data(), ToBf16(w).data(), bias ? b.data() : nullptr, g, y16.data());
      for (size_t e = 0; e < y.size(); ++e) {
        ASSERT_NEAR(y[e], expected[e], ForwardTolerance(g))
            << "float32 element " << e << " of c " << g.c << " h " << g.h << " k " << g.kh << "x" << g.kw
            << " stride " << g.stride << " bias " << bias;
        ASSERT_NEAR(y16[e], expected[e], ForwardTolerance(g))
            << "bf16 element " << e << " of c " << g.c << " h " << g.h << " k " << g.kh << "x" << g.kw
            << " stride " << g.stride << " bias " << bias;
      }
    }
  }
}

TEST(ConvForwardByPixelClassTest, RuleAndOverrides) {
  const ConvGeometry layer4 = Geometry(64, 512, 4, 4, 512, 3, 3, 1, 1);
  const ConvGeometry layer2 = Geometry(64, 128, 14, 14, 128, 3, 3, 1, 1);
  EXPECT_TRUE(ForwardByPixelClassApplies(layer4, false));
  EXPECT_FALSE(ForwardByPixelClassApplies(layer4, true));  // GEMMs on AMX tiles keep the unfolded rows
  EXPECT_FALSE(ForwardByPixelClassApplies(layer2, false));
  SetForwardAlgorithm(ForwardAlgorithm::kRows);
  EXPECT_FALSE(ForwardByPixelClassApplies(layer4, false));
  SetForwardAlgorithm(ForwardAlgorithm::kClasses);
  EXPECT_TRUE(ForwardByPixelClassApplies(layer2, false));
  EXPECT_TRUE(ForwardByPixelClassApplies(layer4, true));
  SetForwardAlgorithm(ForwardAlgorithm::kAuto);
}

// The channels-last forward on im2col (weights [out, c, kh, kw]) gives the same output with either
// algorithm.
TEST(ConvForwardByPixelClassTest, ChannelsLastForwardAgreesWithTheUnfoldedRows) {
  SetConvKernel(ConvKernel::kIm2Col);
  for (const ConvGeometry& g : kGeometries) {
    const std::vector<float> x = Bf16Exact(g.n * g.h * g.w * g.c, 11), w = Bf16Exact(g.out * g.K(), 12);
    const std::vector<float> b = Bf16Exact(g.out, 13);
    const std::vector<BFloat16> x16 = ToBf16(x), w16 = ToBf16(w);
    const size_t outputs = g.n * g.P() * g.out;
    std::vector<float> by_rows(outputs), by_classes(outputs), by_rows16(outputs), by_classes16(outputs);
    const auto run = [&](ForwardAlgorithm algorithm, std::vector<float>& y, std::vector<float>& y16) {
      SetForwardAlgorithm(algorithm);
      ConvForwardChannelsLast(x.data(), w.data(), b.data(), g, y.data());
      ConvForwardChannelsLast(x16.data(), w16.data(), b.data(), g, y16.data());
    };
    run(ForwardAlgorithm::kRows, by_rows, by_rows16);
    run(ForwardAlgorithm::kClasses, by_classes, by_classes16);
    SetForwardAlgorithm(ForwardAlgorithm::kAuto);
    for (size_t e = 0; e < outputs; ++e) {
      ASSERT_NEAR(by_classes[e], by_rows[e], ForwardTolerance(g))
          << "float32 element " << e << " of c " << g.c;
      ASSERT_NEAR(by_classes16[e], by_rows16[e], ForwardTolerance(g))
          << "bf16 element " << e << " of c " << g.c;
    }
  }
  SetConvKernel(ConvKernel::kAuto);
}

// A layer3-like geometry large enough that the gathers, unfoldings and scatters split their images over two
// threads: both passes still match their definitions.
TEST(ConvPaddingSkipTest, ManyImagesOnTwoThreads) {
  const int threads = GetNumThreads();
  SetNumThreads(2);
  const ConvGeometry g = Geometry(16, 64, 7, 7, 64, 3, 3, 1, 1);
  const std::vector<float> x = Bf16Exact(g.n * g.h * g.w * g.c, 14), gy = Bf16Exact(g.n * g.P() * g.out, 15);
  const std::vector<float> w = Bf16Exact(g.out * g.K(), 16), b = Bf16Exact(g.out, 17);
  std::vector<float> gw(g.out * g.K()), y(g.n * g.P() * g.out);
  WeightGradientByTap(ToBf16(x).data(), ToBf16(gy).data(), g, gw.data());
  ForwardByPixelClass(ToBf16(x).data(), ToBf16(w).data(), b.data(), g, y.data());
  SetNumThreads(threads);
  const std::vector<double> expected_gw = Reference(x, gy, g), expected_y = ForwardReference(x, w, b, g);
  for (size_t e = 0; e < gw.size(); ++e)
    ASSERT_NEAR(gw[e], expected_gw[e], Tolerance(g)) << "gw element " << e;
  for (size_t e = 0; e < y.size(); ++e)
    ASSERT_NEAR(y[e], expected_y[e], ForwardTolerance(g)) << "y element " << e;
}

}  // namespace
}  // namespace cpu
}  // namespace ddp
