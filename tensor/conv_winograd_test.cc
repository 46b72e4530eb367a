// The engine's Winograd F(4x4, 3x3) (tensor/conv_winograd.h) against a direct loop in double precision
// (testing/conv_reference.h), forward, input gradient and weight gradient, at shapes with whole and partial
// tiles and padding 0, 1 and 2; its NHWC results are its NCHW results transposed, bit for bit; several chunks
// of images give im2col's numbers; and Conv2d's forward and gradients under the forced kernel match im2col's.
#include "tensor/conv_winograd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tensor/conv_onednn.h"
#include "tensor/gradcheck.h"
#include "tensor/layout_transpose.h"
#include "tensor/ops.h"
#include "testing/conv_reference.h"

namespace ddp {
namespace {

std::vector<float> Uniform(int64_t size, uint64_t seed, float scale = 1.0f) {
  std::vector<float> values = UniformLeaf({size}, seed).ToVector<float>();
  for (float& v : values) v *= scale;
  return values;
}

cpu::ConvGeometry Geometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t out, int64_t padding) {
  return cpu::ConvGeometry{n, c, h, w, out, 3, 3, 1, padding, h + 2 * padding - 2, w + 2 * padding - 2};
}

// Rounds a double-precision reference to float32, as the kernels' results are.
std::vector<float> ToFloat(const std::vector<double>& values) {
  return std::vector<float>(values.begin(), values.end());
}

// y [n, out, oh, ow] = conv(x, w) + b in double precision, NCHW.
std::vector<float> DirectForward(const std::vector<float>& x, const std::vector<float>& w,
                                 const std::vector<float>& b, const cpu::ConvGeometry& g) {
  std::vector<double> y = DirectConvolution(x, w, std::vector<float>(g.n * g.out * g.oh * g.ow), g).y;
  const int64_t plane = g.oh * g.ow;
  for (size_t e = 0; e < y.size() && !b.empty(); ++e) y[e] += b[(e / plane) % g.out];
  return ToFloat(y);
}

// Every |a - b| within tolerance times b's largest magnitude.
void ExpectNear(const std::vector<float>& a, const std::vector<float>& b, float tolerance,
                const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  float scale = 0.0f;
  for (float v : b) scale = std::max(scale, std::fabs(v));
  ASSERT_GT(scale, 0.0f) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], tolerance * scale) << what << " element " << i;
}

// [n, channels, pixels] -> [n, pixels, channels] and back.
std::vector<float> ToNhwc(const std::vector<float>& v, int64_t n, int64_t channels, int64_t pixels) {
  std::vector<float> t(v.size());
  cpu::Transpose32(v.data(), n, channels, pixels, t.data());
  return t;
}
std::vector<float> ToNchw(const std::vector<float>& v, int64_t n, int64_t channels, int64_t pixels) {
  std::vector<float> t(v.size());
  cpu::Transpose32(v.data(), n, pixels, channels, t.data());
  return t;
}

struct Case {
  int64_t n, c, h, w, out, padding;
  bool bias;
};

// Whole 4x4 tiles (8x8, 4x4 outputs), partial ones (7x7, 5x9, 3x3), padding 0, 1 and 2, more output than
// input channels and fewer.
const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {2, 16, 8, 8, 24, 1, true}, {3, 8, 7, 7, 16, 1, false}, {1, 24, 7, 11, 8, 0, true},
      {2, 8, 4, 4, 8, 1, true},   {2, 16, 3, 3, 8, 2, false}, {1, 32, 14, 14, 32, 1, true},
  };
  return cases;
}

TEST(WinogradAvx2Test, ForwardMatchesTheDirectLoop) {
  uint64_t seed = 10;
  for (const Case& k : Cases()) {
    const cpu::ConvGeometry g = Geometry(k.n, k.c, k.h, k.w, k.out, k.padding);
    SCOPED_TRACE(::testing::Message() << "n=" << k.n << " c=" << k.c << " " << k.h << "x" << k.w
                                      << " out=" << k.out << " padding=" << k.padding);
    ASSERT_TRUE(cpu::WinogradAvx2Fits(g));
    const std::vector<float> x = Uniform(g.n * g.c * g.h * g.w, ++seed);
    const std::vector<float> w = Uniform(g.out * g.c * 9, ++seed, 0.2f);
    const std::vector<float> b = k.bias ? Uniform(g.out, ++seed) : std::vector<float>();
    std::vector<float> y(g.n * g.out * g.oh * g.ow, -7.0f);
    cpu::WinogradAvx2Forward(x.data(), w.data(), k.bias ? b.data() : nullptr, g, y.data());
    ExpectNear(y, DirectForward(x, w, b, g), 1e-5f, "y");

    cpu::ConvGeometry nhwc = g;
    nhwc.channels_last = true;
    const std::vector<float> x_nhwc = ToNhwc(x, g.n, g.c, g.h * g.w);
    std::vector<float> y_nhwc(y.size());
    cpu::WinogradAvx2Forward(x_nhwc.data(), w.data(), k.bias ? b.data() : nullptr, nhwc, y_nhwc.data());
    EXPECT_EQ(ToNchw(y_nhwc, g.n, g.out, g.oh * g.ow), y) << "NHWC against NCHW";
  }
}

TEST(WinogradAvx2Test, InputGradientMatchesTheDirectLoop) {
  uint64_t seed = 40;
  for (const Case& k : Cases()) {
    const cpu::ConvGeometry g = Geometry(k.n, k.c, k.h, k.w, k.out, k.padding);
    SCOPED_TRACE(::testing::Message() << "n=" << k.n << " c=" << k.c << " " << k.h << "x" << k.w
                                      << " out=" << k.out << " padding=" << k.padding);
    const std::vector<float> w = Uniform(g.out * g.c * 9, ++seed, 0.2f);
    const std::vector<float> gy = Uniform(g.n * g.out * g.oh * g.ow, ++seed);
    std::vector<float> gx(g.n * g.c * g.h * g.w, -7.0f);
    cpu::WinogradAvx2BackwardData(w.data(), gy.data(), g, gx.data());
    ExpectNear(gx, ToFloat(DirectConvolution(std::vector<float>(gx.size()), w, gy, g).gx), 1e-5f, "gx");

    cpu::ConvGeometry nhwc = g;
    nhwc.channels_last = true;
    const std::vector<float> gy_nhwc = ToNhwc(gy, g.n, g.out, g.oh * g.ow);
    std::vector<float> gx_nhwc(gx.size());
    cpu::WinogradAvx2BackwardData(w.data(), gy_nhwc.data(), nhwc, gx_nhwc.data());
    EXPECT_EQ(ToNchw(gx_nhwc, g.n, g.c, g.h * g.w), gx) << "NHWC against NCHW";
  }
}

TEST(WinogradAvx2Test, WeightGradientMatchesTheDirectLoop) {
  uint64_t seed = 70;
  for (const Case& k : Cases()) {
    const cpu::ConvGeometry g = Geometry(k.n, k.c, k.h, k.w, k.out, k.padding);
    SCOPED_TRACE(::testing::Message() << "n=" << k.n << " c=" << k.c << " " << k.h << "x" << k.w
                                      << " out=" << k.out << " padding=" << k.padding);
    const std::vector<float> x = Uniform(g.n * g.c * g.h * g.w, ++seed);
    const std::vector<float> gy = Uniform(g.n * g.out * g.oh * g.ow, ++seed);
    std::vector<float> gw(g.out * g.c * 9, -7.0f);
    cpu::WinogradAvx2BackwardWeights(x.data(), gy.data(), g, gw.data());
    ExpectNear(gw, ToFloat(DirectConvolution(x, std::vector<float>(gw.size()), gy, g).gw), 1e-5f, "gw");

    cpu::ConvGeometry nhwc = g;
    nhwc.channels_last = true;
    const std::vector<float> x_nhwc = ToNhwc(x, g.n, g.c, g.h * g.w);
    const std::vector<float> gy_nhwc = ToNhwc(gy, g.n, g.out, g.oh * g.ow);
    std::vector<float> gw_nhwc(gw.size());
    cpu::WinogradAvx2BackwardWeights(x_nhwc.data(), gy_nhwc.data(), nhwc, gw_nhwc.data());
    EXPECT_EQ(gw_nhwc, gw) << "NHWC against NCHW";
  }
}

TEST(WinogradAvx2Test, ShapesItDoesNotTake) {
  EXPECT_FALSE(cpu::WinogradAvx2Fits(Geometry(2, 12, 8, 8, 16, 1)));  // channels not a multiple of 8
  EXPECT_FALSE(cpu::WinogradAvx2Fits(Geometry(2, 16, 8, 8, 20, 1)));
  EXPECT_FALSE(cpu::WinogradAvx2Fits(Geometry(0, 16, 8, 8, 16, 1)));  // no images
  cpu::ConvGeometry strided = Geometry(2, 16, 8, 8, 16, 1);
  strided.stride = 2;
  strided.oh = strided.ow = 4;
  EXPECT_FALSE(cpu::WinogradAvx2Fits(strided));
  cpu::ConvGeometry five = Geometry(2, 16, 8, 8, 16, 2);
  five.kh = five.kw = 5;
  EXPECT_FALSE(cpu::WinogradAvx2Fits(five));
}

// Conv2d with the kernel forced (the dispatch of tensor/conv_onednn.h): a batch of several chunks of images
// (ResNet-18's layer4 shape, 512 channels on 4x4 images) and a layer1-like one, forward and every
// gradient within 1e-4 of im2col's.
TEST(WinogradAvx2Test, Conv2dUnderTheForcedKernelMatchesIm2Col) {
  struct Shape4 {
    int64_t n, c, hw;
  };
  for (const Shape4 s : {Shape4{90, 512, 4}, Shape4{4, 64, 28}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << s.n << " c=" << s.c << " " << s.hw << "x" << s.hw);
    const Tensor x0 = UniformLeaf({s.n, s.c, s.hw, s.hw}, 70).Detach();
    const Tensor w0 = UniformLeaf({s.c, s.c, 3, 3}, 71, -0.05f, 0.05f).Detach();
    const Tensor b0 = UniformLeaf({s.c}, 72).Detach();
    struct Result {
      std::vector<float> y, gx, gw, gb;
    };
    auto run = [&](cpu::ConvKernel kernel) {
      cpu::SetConvKernel(kernel);
      Tensor x = Clone(x0), w = Clone(w0), b = Clone(b0);
      for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
      Tensor y = Conv2d(x, w, b, 1, 1);
      y.Backward(UniformLeaf(y.shape(), 73).Detach());
      Result result{y.ToVector<float>(), x.grad().ToVector<float>(), w.grad().ToVector<float>(),
                    b.grad().ToVector<float>()};
      cpu::SetConvKernel(cpu::ConvKernel::kAuto);
      return result;
    };
    const Result reference = run(cpu::ConvKernel::kIm2Col);
    const Result winograd = run(cpu::ConvKernel::kWinogradAvx2);
    cpu::SetConvKernel(cpu::ConvKernel::kWinogradAvx2);
    EXPECT_EQ(cpu::OneDnnConvImplementation(Geometry(s.n, s.c, s.hw, s.hw, s.c, 1)), "winograd_avx2");
    cpu::SetConvKernel(cpu::ConvKernel::kAuto);
    ExpectNear(winograd.y, reference.y, 1e-4f, "y");
    ExpectNear(winograd.gx, reference.gx, 1e-4f, "gx");
    ExpectNear(winograd.gw, reference.gw, 1e-4f, "gw");
    ExpectNear(winograd.gb, reference.gb, 1e-4f, "gb");
  }
}

}  // namespace
}  // namespace ddp
