// The channels-last bf16 forward on AMX tiles against the unfolded path it replaces (rows [pixels, 9c]
// times the weights in oneDNN's bf16 matmul), bit for bit, at ResNet-18's layer1 and layer2 shapes, a
// stride-2 one, output rows wider than one tile and batches of several images; the forward along the
// padded grid against the same path, bit for bit, at ResNet-18's layer3 and layer4 shapes (K chunked) and
// the stride-2 ones into them, groups of several sizes and maps of other sizes; the input gradient on AMX
// tiles against oneDNN's backward-data primitive, bit for bit, at ResNet-18's 3x3 shapes (stride 1 and 2)
// and maps of other sizes; the weight gradient on AMX tiles against the unfolded rows' oneDNN matmuls, bit
// for bit, at ResNet-18's shapes and groups of other sizes; and which convolutions they take. Skips, saying
// so, on a CPU without AMX or where oneDNN is kept off it.
#include "tensor/conv_amx.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "tensor/amx_test_support.h"
#include "tensor/bf16_convert.h"
#include "tensor/conv_amx_grid_forward.h"
#include "tensor/conv_amx_input_gradient.h"
#include "tensor/conv_amx_weight_gradient.h"
#include "tensor/conv_channels_last.h"
#include "tensor/conv_forward_by_pixel_class.h"
#include "tensor/conv_onednn.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/threads.h"

namespace ddp {
namespace {

cpu::ConvGeometry Geometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t out, int64_t stride) {
  cpu::ConvGeometry g{n, c, h, w, out, 3, 3, stride, 1, (h - 1) / stride + 1, (w - 1) / stride + 1};
  g.channels_last = true;
  return g;
}

using amx_test::kOneDnnOffAmx;
using amx_test::OneDnnOnAmx;
using amx_test::RandomBf16;

// g with NCHW activations, and g as a 1x1 convolution without padding: shapes the AMX kernels refuse.
cpu::ConvGeometry Nchw(cpu::ConvGeometry g) {
  g.channels_last = false;
  return g;
}
cpu::ConvGeometry Pointwise(cpu::ConvGeometry g) {
  g.kh = g.kw = 1;
  g.padding = 0;
  return g;
}

// Runs `compute` (which writes `out`) at 1 and 2 kernel threads and expects `out` to hold `expected`'s bits
// after each.
void ExpectSameBitsAtOneAndTwoThreads(const std::function<void()>& compute, const std::vector<float>& out,
                                      const std::vector<float>& expected) {
  for (int threads : {1, 2}) {
    SetNumThreads(threads);
    compute();
    EXPECT_EQ(std::memcmp(out.data(), expected.data(), out.size() * sizeof(float)), 0)
        << threads << " threads";
  }
  SetNumThreads(1);
}

// The unfolded rows [count * pixels, (ky, kx, c)] of images [first, first + count), zeros in the padding.
std::vector<BFloat16> UnfoldedRows(const std::vector<BFloat16>& x, const cpu::ConvGeometry& g, int64_t first,
                                   int64_t count) {
  const int64_t K = g.K(), P = g.P(), taps = g.kh * g.kw;
  std::vector<BFloat16> rows(count * P * K);
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t p = 0; p < P; ++p) {
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t iy = p / g.ow * g.stride + t / g.kw - g.padding;
        const int64_t ix = p % g.ow * g.stride + t % g.kw - g.padding;
        BFloat16* dst = rows.data() + (i * P + p) * K + t * g.c;
        const bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
        for (int64_t ch = 0; ch < g.c; ++ch) {
          dst[ch] = inside ? x[(((first + i) * g.h + iy) * g.w + ix) * g.c + ch] : BFloat16{};
        }
      }
    }
  }
  return rows;
}

// The weights [out, c, 3, 3] reordered to [out, (ky, kx, c)], as the unfolded path multiplies them.
std::vector<BFloat16> TapsFirst(const std::vector<BFloat16>& w, const cpu::ConvGeometry& g) {
  std::vector<BFloat16> taps_first(w.size());
  for (int64_t o = 0; o < g.out; ++o) {
    for (int64_t ch = 0; ch < g.c; ++ch) {
      for (int64_t t = 0; t < 9; ++t) taps_first[(o * 9 + t) * g.c + ch] = w[(o * g.c + ch) * 9 + t];
    }
  }
  return taps_first;
}

// The unfolded path: each group's rows times the weights reordered to [out, (ky, kx, c)], in oneDNN's bf16
// matmul, `images` images per GEMM.
std::vector<float> UnfoldedForward(const std::vector<BFloat16>& x, const std::vector<BFloat16>& w,
                                   const cpu::ConvGeometry& g, int64_t images) {
  const int64_t K = g.K(), P = g.P();
  const std::vector<BFloat16> taps_first = TapsFirst(w, g);
  std::vector<float> y(g.n * P * g.out);
  for (int64_t first = 0; first < g.n; first += images) {
    const int64_t count = std::min(images, g.n - first);
    const std::vector<BFloat16> rows = UnfoldedRows(x, g, first, count);
    cpu::Gemm(false, true, count * P, g.out, K, 1.0f, rows.data(), K, taps_first.data(), K, 0.0f,
              y.data() + first * P * g.out, g.out);
  }
  return y;
}

TEST(ConvAmxTest, MatchesTheUnfoldedPathBitForBit) {
  const cpu::ConvGeometry probe = Geometry(1, 64, 28, 28, 64, 1);
  if (!cpu::AmxForwardApplies(probe)) GTEST_SKIP() << "no AMX on this CPU (or the kernel refuses its tiles)";
  if (!OneDnnOnAmx()) GTEST_SKIP() << kOneDnnOffAmx;
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn);
  struct Case {
    int64_t n, c, hw_h, hw_w, out, stride, images_per_gemm;
  };
  // ResNet-18's layer1 and layer2 (with their unfolded groups), layer2.0's stride 2, outputs of 20 and
  // 10 pixels a row (a full and a partial pixel tile), 128 output channels (two passes of 64).
  const Case cases[] = {{3, 64, 28, 28, 64, 1, 2}, {5, 128, 14, 14, 128, 1, 4}, {3, 64, 28, 28, 128, 2, 9},
                        {2, 32, 9, 20, 64, 1, 1},  {2, 32, 9, 20, 64, 2, 2},    {4, 96, 6, 5, 192, 1, 3}};
  for (const Case& k : cases) {
    const cpu::ConvGeometry g = Geometry(k.n, k.c, k.hw_h, k.hw_w, k.out, k.stride);
    SCOPED_TRACE(::testing::Message() << "n " << k.n << " c " << k.c << " " << k.hw_h << "x" << k.hw_w
                                      << " out " << k.out << " stride " << k.stride);
    ASSERT_TRUE(cpu::AmxForwardApplies(g));
    const std::vector<BFloat16> x = RandomBf16(g.n * g.h * g.w * g.c, 1.0f, 11);
    const std::vector<BFloat16> w = RandomBf16(g.out * g.K(), 0.05f, 12);
    std::vector<float> y(g.n * g.P() * g.out, -1.0f);
    for (int threads : {1, 2}) {
      SetNumThreads(threads);
      cpu::AmxForwardChannelsLast(x.data(), w.data(), g, y.data());
      const std::vector<float> expected = UnfoldedForward(x, w, g, k.images_per_gemm);
      ASSERT_EQ(std::memcmp(y.data(), expected.data(), y.size() * sizeof(float)), 0) << threads << " threads";
    }
    SetNumThreads(1);
  }
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
}

TEST(ConvAmxTest, GridForwardMatchesTheUnfoldedPathBitForBit) {
  if (!cpu::AmxGridForwardComputes(Geometry(1, 64, 4, 4, 64, 1))) {
    GTEST_SKIP() << "no AMX on this CPU (or the kernel refuses its tiles)";
  }
  if (!OneDnnOnAmx()) GTEST_SKIP() << kOneDnnOffAmx;
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn);
  struct Case {
    int64_t n, c, h, w, out, stride, images_per_gemm;
  };
  // ResNet-18's layer3 (groups of 9 images, 441 pixels, and a last of 2) and layer4 (14 images, 224 pixels,
  // and a last of 2) at 28x28 images, layer3 at 32x32 (7 images, 448 pixels), one group of 3 images, a
  // map of one row and one of one pixel (GEMMs of 4 rows: an AVX-512 kernel, nothing computed), channel
  // counts that are not powers of two (K = 1440, 32 and 96 output channels), K <= 1152 (one chunk); at
  // stride 2 the convolutions into layer4 and layer3, maps of odd and even sizes, K = 1440.
  const Case cases[] = {
      {20, 256, 7, 7, 256, 1, 9},   {30, 512, 4, 4, 512, 1, 14}, {15, 256, 8, 8, 256, 1, 7},
      {3, 512, 4, 4, 512, 1, 3},    {5, 160, 1, 9, 96, 1, 2},    {4, 288, 1, 1, 32, 1, 4},
      {5, 160, 5, 3, 96, 1, 2},     {3, 96, 6, 5, 64, 1, 3},     {20, 256, 7, 7, 512, 2, 20},
      {10, 128, 14, 14, 256, 2, 4}, {3, 64, 9, 5, 96, 2, 2},     {4, 160, 8, 6, 64, 2, 3}};
  for (const Case& k : cases) {
    const cpu::ConvGeometry g = Geometry(k.n, k.c, k.h, k.w, k.out, k.stride);
    SCOPED_TRACE(::testing::Message()
                 << "n " << k.n << " c " << k.c << " " << k.h << "x" << k.w << " out " << k.out << " stride "
                 << k.stride << ", " << k.images_per_gemm << " images per GEMM");
    ASSERT_TRUE(cpu::AmxGridForwardComputes(g));
    const std::vector<BFloat16> x = RandomBf16(g.n * g.h * g.w * g.c, 1.0f, 41);
    const std::vector<BFloat16> w = RandomBf16(g.out * g.K(), 0.05f, 42);
    const std::vector<BFloat16> taps_first = TapsFirst(w, g);
    for (int threads : {1, 2}) {  // each against the unfolded path at that count: its chunks may differ
      SetNumThreads(threads);
      const std::vector<float> expected = UnfoldedForward(x, w, g, k.images_per_gemm);
      std::vector<float> y(expected.size(), -1.0f);
      const int64_t computed =
          cpu::AmxGridForwardChannelsLast(x.data(), taps_first.data(), g, k.images_per_gemm, y.data());
      const int64_t full = g.n / k.images_per_gemm * k.images_per_gemm, m = k.images_per_gemm * g.P();
      // Where oneDNN runs the GEMM on an AVX-512 kernel instead (small ones), there is no order to keep.
      EXPECT_EQ(computed > 0, cpu::GemmOnAmxBrgemm(false, true, m, g.out, g.K(), g.K(), g.K(), g.out, false))
          << computed << " images, " << threads << " threads";
      EXPECT_TRUE(computed == 0 || computed == full || computed == g.n) << computed << " images";
      const size_t floats = computed * g.P() * g.out;
      EXPECT_EQ(std::memcmp(y.data(), expected.data(), floats * sizeof(float)), 0) << threads << " threads";
      EXPECT_TRUE(std::all_of(y.begin() + floats, y.end(), [](float v) { return v == -1.0f; }))
          << "wrote past the images it computed, " << threads << " threads";
    }
    SetNumThreads(1);
  }
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
}

// The engine's channels-last bf16 forward (ConvForwardChannelsLast) with its own kernel choice against the
// same call with the unfolded rows forced (ForwardAlgorithm::kRows), bit for bit: at ResNet-18's layer3
// (groups of 9 images and a last of 2), layer4 (14 and 2) and the stride-2 convolutions into both, where it
// takes the grid (or, for the one into layer3, would take the one-row kernel), at 1 and 2 threads.
TEST(ConvAmxTest, EnginesForwardKeepsTheUnfoldedRowsBits) {
  if (!cpu::AmxGridForwardComputes(Geometry(1, 64, 4, 4, 64, 1))) GTEST_SKIP() << "no AMX on this CPU";
  if (!OneDnnOnAmx()) GTEST_SKIP() << kOneDnnOffAmx;
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn);
  const cpu::ConvGeometry cases[] = {Geometry(20, 256, 7, 7, 256, 1), Geometry(30, 512, 4, 4, 512, 1),
                                     Geometry(6, 256, 7, 7, 512, 2), Geometry(5, 128, 14, 14, 256, 2)};
  for (const cpu::ConvGeometry& g : cases) {
    SCOPED_TRACE(::testing::Message() << "n " << g.n << " c " << g.c << " " << g.h << "x" << g.w << " out "
                                      << g.out << " stride " << g.stride);
    const std::vector<BFloat16> x = RandomBf16(g.n * g.h * g.w * g.c, 1.0f, 45);
    const std::vector<BFloat16> w = RandomBf16(g.out * g.K(), 0.05f, 46);
    // Each thread count against the rows at that count: oneDNN's chunks may differ between them.
    for (int threads : {1, 2}) {
      SetNumThreads(threads);
      std::vector<float> rows(g.n * g.P() * g.out, -1.0f), ours(rows.size(), -2.0f);
      cpu::SetForwardAlgorithm(cpu::ForwardAlgorithm::kRows);
      cpu::ConvForwardChannelsLast(x.data(), w.data(), nullptr, g, rows.data());
      cpu::SetForwardAlgorithm(cpu::ForwardAlgorithm::kAuto);
      cpu::ConvForwardChannelsLast(x.data(), w.data(), nullptr, g, ours.data());
      EXPECT_EQ(std::memcmp(ours.data(), rows.data(), rows.size() * sizeof(float)), 0)
          << threads << " threads";
    }
    SetNumThreads(1);
  }
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
}

TEST(ConvAmxTest, GridForwardTakesThreeByThreeOnAmxGemms) {
  if (!cpu::AmxGridForwardComputes(Geometry(1, 64, 4, 4, 64, 1))) GTEST_SKIP() << "no AMX on this CPU";
  EXPECT_TRUE(cpu::AmxGridForwardComputes(Geometry(1, 256, 7, 7, 512, 2)));
  EXPECT_FALSE(cpu::AmxGridForwardComputes(Geometry(1, 64, 9, 9, 64, 3)));       // stride 3
  EXPECT_TRUE(cpu::AmxGridForwardPreferred(Geometry(64, 128, 14, 14, 256, 2)));  // 7-pixel rows: the grid
  EXPECT_TRUE(cpu::AmxGridForwardPreferred(Geometry(64, 512, 4, 4, 512, 1)));
  EXPECT_FALSE(cpu::AmxGridForwardPreferred(Geometry(64, 128, 14, 14, 128, 1)));  // 14: the one-row kernel
  EXPECT_FALSE(cpu::AmxGridForwardPreferred(Geometry(64, 64, 28, 28, 128, 2)));
  EXPECT_FALSE(cpu::AmxGridForwardComputes(Geometry(1, 48, 4, 4, 64, 1)));    // channels not a multiple of 32
  EXPECT_FALSE(cpu::AmxGridForwardComputes(Geometry(1, 64, 4, 4, 48, 1)));    // outputs not a multiple of 32
  EXPECT_FALSE(cpu::AmxGridForwardComputes(Nchw(Geometry(1, 64, 4, 4, 64, 1))));
  EXPECT_FALSE(cpu::AmxGridForwardComputes(Pointwise(Geometry(1, 64, 4, 4, 64, 1))));
  // Where the GEMMs are float32's there is no AMX order to keep: it computes nothing and says so.
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kFloat32);
  const cpu::ConvGeometry g = Geometry(2, 256, 7, 7, 256, 1);
  const std::vector<BFloat16> x = RandomBf16(g.n * g.h * g.w * g.c, 1.0f, 43),
                              w = RandomBf16(g.out * g.K(), 1.0f, 44);
  std::vector<float> y(g.n * g.P() * g.out, -1.0f);
  EXPECT_EQ(cpu::AmxGridForwardChannelsLast(x.data(), w.data(), g, 2, y.data()), 0);
  EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return v == -1.0f; }));
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
}

// The unfolded weight gradient: per group of `images` images gw[out, (ky, kx, c)] (+)= gy_rows^T x rows in
// oneDNN's bf16 matmul (the first group writing, the others adding), then reordered to [out, c, ky, kx].
std::vector<float> UnfoldedWeightGradient(const std::vector<BFloat16>& x, const std::vector<BFloat16>& gy,
                                          const cpu::ConvGeometry& g, int64_t images) {
  const int64_t K = g.K(), P = g.P(), taps = g.kh * g.kw;
  std::vector<float> taps_first(g.out * K), gw(g.out * K);
  for (int64_t first = 0; first < g.n; first += images) {
    const int64_t count = std::min(images, g.n - first);
    const std::vector<BFloat16> rows = UnfoldedRows(x, g, first, count);
    cpu::Gemm(true, false, g.out, K, count * P, 1.0f, gy.data() + first * P * g.out, g.out, rows.data(), K,
              first == 0 ? 0.0f : 1.0f, taps_first.data(), K);
  }
  for (int64_t o = 0; o < g.out; ++o) {
    for (int64_t t = 0; t < taps; ++t) {
      for (int64_t ch = 0; ch < g.c; ++ch)
        gw[(o * g.c + ch) * taps + t] = taps_first[(o * taps + t) * g.c + ch];
    }
  }
  return gw;
}

TEST(ConvAmxTest, WeightGradientMatchesTheUnfoldedRowsBitForBit) {
  if (!cpu::AmxForwardApplies(Geometry(1, 64, 4, 4, 64, 1))) {
    GTEST_SKIP() << "no AMX on this CPU (or the kernel refuses its tiles)";
  }
  if (!OneDnnOnAmx()) GTEST_SKIP() << kOneDnnOffAmx;
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn);
  struct Case {
    int64_t n, c, h, w, out, stride, images_per_group;
    bool pointwise;
  };
  // ResNet-18's layer4 (groups of 14 images, 224 pixels, and a last smaller one), layer3 (9 images: groups
  // of 441 pixels, an odd count, and 98), the stride-2 convolution into layer4 (448), layer3 on 32x32 images
  // (448), a 1x1 stride-2 convolution (groups of 80 pixels, padded to 96), one group of 48 pixels, groups of
  // 75 and 105 pixels (odd: the last pair half zeros) with channel counts that are not powers of two. (oneDNN
  // runs smaller GEMMs on an AVX-512 kernel; the engine then keeps the rows.)
  const Case cases[] = {{30, 512, 4, 4, 512, 1, 14, false}, {20, 256, 7, 7, 256, 1, 9, false},
                        {30, 256, 7, 7, 512, 2, 28, false}, {15, 256, 8, 8, 256, 1, 7, false},
                        {20, 256, 8, 8, 512, 2, 5, true},   {3, 512, 4, 4, 512, 1, 3, false},
                        {5, 96, 9, 5, 160, 2, 5, false},    {3, 224, 5, 7, 320, 1, 3, false}};
  for (const Case& k : cases) {
    cpu::ConvGeometry g = Geometry(k.n, k.c, k.h, k.w, k.out, k.stride);
    if (k.pointwise) g = Pointwise(g);
    SCOPED_TRACE(::testing::Message() << "n " << k.n << " c " << k.c << " " << k.h << "x" << k.w << " out "
                                      << k.out << " stride " << k.stride << " " << g.kh << "x" << g.kw << ", "
                                      << k.images_per_group << " images per group");
    ASSERT_TRUE(cpu::AmxWeightGradientApplies(g, k.images_per_group));
    const std::vector<BFloat16> x = RandomBf16(g.n * g.h * g.w * g.c, 1.0f, 31);
    const std::vector<BFloat16> gy = RandomBf16(g.n * g.P() * g.out, 0.01f, 32);
    const std::vector<float> expected = UnfoldedWeightGradient(x, gy, g, k.images_per_group);
    std::vector<float> gw(expected.size(), -1.0f);
    ExpectSameBitsAtOneAndTwoThreads(
        [&] { cpu::AmxWeightGradientChannelsLast(x.data(), gy.data(), g, k.images_per_group, gw.data()); },
        gw, expected);
  }
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
}

TEST(ConvAmxTest, WeightGradientTakesGroupsItSumsInOneDnnsOrder) {
  if (!cpu::AmxForwardApplies(Geometry(1, 64, 4, 4, 64, 1))) GTEST_SKIP() << "no AMX on this CPU";
  if (!OneDnnOnAmx()) GTEST_SKIP() << kOneDnnOffAmx;
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn);
  EXPECT_TRUE(cpu::AmxWeightGradientApplies(Geometry(64, 512, 4, 4, 512, 1), 14));     // layer4: 224 pixels
  EXPECT_TRUE(cpu::AmxWeightGradientApplies(Geometry(64, 256, 8, 8, 256, 1), 7));      // 448 pixels
  EXPECT_FALSE(cpu::AmxWeightGradientApplies(Geometry(64, 128, 14, 14, 256, 2), 18));  // 882: another order
  EXPECT_FALSE(
      cpu::AmxWeightGradientApplies(Geometry(64, 48, 4, 4, 64, 1), 1));  // channels not a multiple of 32
  EXPECT_FALSE(
      cpu::AmxWeightGradientApplies(Geometry(64, 64, 4, 4, 48, 1), 1));  // outputs not a multiple of 32
  EXPECT_FALSE(cpu::AmxWeightGradientApplies(Geometry(0, 64, 4, 4, 64, 1), 1));  // no images
  EXPECT_FALSE(cpu::AmxWeightGradientApplies(Nchw(Geometry(1, 64, 4, 4, 64, 1)), 1));
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kFloat32);  // the GEMMs off oneDNN: no order to keep
  EXPECT_FALSE(cpu::AmxWeightGradientApplies(Geometry(64, 512, 4, 4, 512, 1), 14));
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
}

TEST(ConvAmxTest, TakesOnlyWhatItSumsInOneDnnsOrder) {
  if (!cpu::AmxForwardApplies(Geometry(1, 64, 28, 28, 64, 1))) GTEST_SKIP() << "no AMX on this CPU";
  EXPECT_FALSE(cpu::AmxForwardApplies(Geometry(1, 256, 7, 7, 256, 1)));  // K = 2304: another order
  EXPECT_FALSE(cpu::AmxForwardApplies(Geometry(1, 16, 28, 28, 64, 1)));  // channels not a multiple of 32
  EXPECT_FALSE(cpu::AmxForwardApplies(Geometry(1, 64, 28, 28, 32, 1)));  // outputs not a multiple of 64
  EXPECT_FALSE(cpu::AmxForwardApplies(Geometry(1, 64, 28, 28, 64, 3)));  // stride 3
  EXPECT_FALSE(cpu::AmxForwardApplies(Nchw(Geometry(1, 64, 28, 28, 64, 1))));
  EXPECT_FALSE(cpu::AmxForwardApplies(Pointwise(Geometry(1, 64, 28, 28, 64, 1))));
}

TEST(ConvAmxTest, InputGradientMatchesTheBackwardDataPrimitiveBitForBit) {
  if (!cpu::AmxInputGradientComputes(Geometry(1, 64, 4, 4, 64, 1))) {
    GTEST_SKIP() << "no AMX on this CPU (or the kernel refuses its tiles)";
  }
  if (!OneDnnOnAmx()) GTEST_SKIP() << kOneDnnOffAmx;
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn);
  struct Case {
    int64_t n, c, h, w, out, stride;
  };
  // ResNet-18's layer4 (maps of at most 16 pixels, one tile per image: 5 images, 4 + 1 per weight tile),
  // layer3, layer2 and layer1 (image by image; fewer images), a 5x5 map with weights above 1.5 MB (pass by
  // pass), maps of one pixel (3 images) and of one row (2 images), and wider than a tile (an odd count of
  // tiles), channel counts that are not powers of two; and the stride-2 convolutions into layer4 (pass by
  // pass), layer3 and layer2, and maps of odd and even sizes and of one pixel at stride 2 (parity classes
  // of one row or none).
  const Case cases[] = {{5, 512, 4, 4, 512, 1},  {3, 256, 7, 7, 256, 1}, {2, 128, 14, 14, 128, 1},
                        {2, 64, 28, 28, 64, 1},  {3, 64, 1, 1, 96, 1},   {2, 128, 1, 9, 64, 1},
                        {2, 192, 5, 20, 160, 1}, {3, 256, 7, 7, 512, 2}, {2, 128, 14, 14, 256, 2},
                        {2, 64, 28, 28, 128, 2}, {2, 64, 8, 5, 96, 2},   {2, 32, 1, 1, 64, 2},
                        {2, 64, 2, 3, 32, 2},    {2, 512, 5, 5, 512, 1}};
  for (const Case& k : cases) {
    const cpu::ConvGeometry g = Geometry(k.n, k.c, k.h, k.w, k.out, k.stride);
    SCOPED_TRACE(::testing::Message() << "n " << k.n << " c " << k.c << " " << k.h << "x" << k.w << " out "
                                      << k.out << " stride " << k.stride);
    ASSERT_TRUE(cpu::AmxInputGradientComputes(g));
    const std::vector<BFloat16> gy = RandomBf16(g.n * g.P() * g.out, 1.0f, 21);
    const std::vector<BFloat16> w = RandomBf16(g.out * g.K(), 0.05f, 22);
    std::vector<float> expected(g.n * g.h * g.w * g.c), gx(expected.size(), -1.0f);
    ASSERT_TRUE(cpu::OneDnnConvBackwardData(w.data(), gy.data(), g, expected.data()));
    ExpectSameBitsAtOneAndTwoThreads(
        [&] { cpu::AmxInputGradientChannelsLast(w.data(), gy.data(), g, gx.data()); }, gx, expected);
  }
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
}

TEST(ConvAmxTest, InputGradientTakesOnlyThreeByThreeOnSmallMaps) {
  if (!cpu::AmxInputGradientComputes(Geometry(1, 64, 4, 4, 64, 1))) GTEST_SKIP() << "no AMX on this CPU";
  EXPECT_TRUE(cpu::AmxInputGradientApplies(Geometry(64, 512, 4, 4, 512, 1)));   // ResNet-18's layer4
  EXPECT_TRUE(cpu::AmxInputGradientApplies(Geometry(64, 256, 7, 7, 256, 1)));   // layer3
  EXPECT_TRUE(cpu::AmxInputGradientApplies(Geometry(64, 256, 8, 8, 256, 1)));   // layer3 on 32x32 images
  EXPECT_FALSE(cpu::AmxInputGradientApplies(Geometry(64, 256, 9, 9, 256, 1)));  // larger maps: the primitive
  EXPECT_TRUE(cpu::AmxInputGradientComputes(Geometry(64, 256, 9, 9, 256, 1)));
  EXPECT_FALSE(cpu::AmxInputGradientApplies(Geometry(64, 128, 14, 14, 128, 1)));  // layer2: the primitive
  EXPECT_TRUE(cpu::AmxInputGradientApplies(Geometry(64, 256, 7, 7, 512, 2)));     // into layer4
  EXPECT_TRUE(cpu::AmxInputGradientApplies(Geometry(64, 256, 8, 8, 512, 2)));     // the same on 32x32 images
  EXPECT_TRUE(cpu::AmxInputGradientApplies(Geometry(64, 128, 14, 14, 256, 2)));   // into layer3
  EXPECT_TRUE(cpu::AmxInputGradientApplies(Geometry(64, 64, 32, 32, 128, 2)));    // into layer2, 32x32
  EXPECT_TRUE(cpu::AmxInputGradientApplies(Geometry(64, 64, 56, 56, 128, 2)));    // 56x56 (224x224 images)
  EXPECT_FALSE(cpu::AmxInputGradientApplies(Geometry(64, 64, 58, 58, 128, 2)));   // larger: the primitive
  EXPECT_FALSE(cpu::AmxInputGradientComputes(Geometry(1, 64, 9, 9, 128, 3)));     // stride 3
  EXPECT_FALSE(cpu::AmxInputGradientComputes(Geometry(1, 16, 4, 4, 64, 1)));  // channels not a multiple of 32
  EXPECT_FALSE(cpu::AmxInputGradientComputes(Geometry(1, 64, 4, 4, 48, 1)));  // outputs not a multiple of 32
  EXPECT_FALSE(cpu::AmxInputGradientComputes(Nchw(Geometry(1, 64, 4, 4, 64, 1))));
  EXPECT_FALSE(cpu::AmxInputGradientComputes(Pointwise(Geometry(1, 64, 4, 4, 64, 1))));
}

}  // namespace
}  // namespace ddp
