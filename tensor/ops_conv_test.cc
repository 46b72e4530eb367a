// Conv2d, MaxPool2d, BatchNorm and Dropout: forward values against naive reference loops, backward
// against finite differences, running-statistic updates, dropout statistics and shape errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "tensor/autograd.h"
#include "tensor/conv_onednn.h"
#include "tensor/factory.h"
#include "tensor/gradcheck.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

namespace ddp {
namespace {

using Inputs = std::vector<Tensor>;
using Floats = std::vector<float>;

// Variadic so that lambdas with several captures pass through the preprocessor.
#define EXPECT_GRADCHECK(...) EXPECT_EQ(GradCheck(__VA_ARGS__), "")

// A leaf whose values are a shuffled 0.05 * {0, 1, ...}: all distinct by more than GradCheck's 2 * eps,
// so finite differences never move a max-pool argmax.
Tensor DistinctLeaf(const Shape& shape, uint64_t seed) {
  std::vector<float> values(NumElements(shape));
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.05f * static_cast<float>(i) - 1.0f;
  Generator g(seed);
  for (size_t i = values.size(); i > 1; --i) std::swap(values[i - 1], values[g.RandomIndex(i)]);
  Tensor t = FromVector(values, shape);
  t.set_requires_grad(true);
  return t;
}

void ExpectAllNear(const Tensor& actual, const std::vector<float>& expected, float tolerance) {
  ASSERT_EQ(actual.numel(), static_cast<int64_t>(expected.size()));
  std::vector<float> a = actual.ToVector<float>();
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], expected[i], tolerance) << "element " << i;
  }
}

// ---------------------------------------------------------------------------------------------------
// Conv2d

struct ConvCase {
  int64_t n, c, h, w, out, kh, kw, stride, padding;
  bool bias;
};

// Direct convolution, as the definition of torch's F.conv2d (cross-correlation).
std::vector<float> ReferenceConv(const Tensor& x, const Tensor& w, const Tensor& b, const ConvCase& k) {
  const int64_t oh = (k.h + 2 * k.padding - k.kh) / k.stride + 1;
  const int64_t ow = (k.w + 2 * k.padding - k.kw) / k.stride + 1;
  std::vector<float> xv = x.ToVector<float>(), wv = w.ToVector<float>();
  std::vector<float> bv = b.defined() ? b.ToVector<float>() : std::vector<float>(k.out, 0.0f);
  std::vector<float> out;
  for (int64_t i = 0; i < k.n; ++i)
    for (int64_t o = 0; o < k.out; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t z = 0; z < ow; ++z) {
          double total = bv[o];
          for (int64_t ch = 0; ch < k.c; ++ch)
            for (int64_t ki = 0; ki < k.kh; ++ki)
              for (int64_t kj = 0; kj < k.kw; ++kj) {
                const int64_t iy = y * k.stride + ki - k.padding, ix = z * k.stride + kj - k.padding;
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                total += static_cast<double>(xv[((i * k.c + ch) * k.h + iy) * k.w + ix]) *
                         wv[((o * k.c + ch) * k.kh + ki) * k.kw + kj];
              }
          out.push_back(static_cast<float>(total));
        }
  return out;
}

// Stride 1 and 2, padding 0 and 1, non-square images and kernels, batch 1 and 3, several channels, a
// 48x48 image (P > 2048: one image per GEMM, Note [Conv2d image groups]) besides the grouped path, and
// ResNet's strided convolutions without bias.
const std::vector<ConvCase>& ConvCases() {
  static const std::vector<ConvCase> cases = {
      {1, 1, 5, 5, 1, 3, 3, 1, 0, true},  {3, 2, 7, 5, 4, 3, 3, 2, 1, true},
      {2, 3, 6, 9, 2, 2, 2, 1, 1, false}, {1, 2, 8, 8, 3, 3, 3, 2, 0, true},
      {3, 4, 6, 6, 5, 3, 3, 1, 1, true},  {3, 2, 5, 7, 3, 1, 1, 1, 0, true},
      {2, 2, 7, 6, 3, 3, 2, 1, 1, true},  {1, 3, 9, 8, 2, 5, 5, 2, 2, true},
      {2, 1, 48, 48, 2, 3, 3, 1, 1, true},
      // ResNet's downsample (1x1, stride 2, no bias, odd size) and a strided 3x3 without bias.
      {2, 4, 7, 7, 3, 1, 1, 2, 0, false}, {2, 3, 7, 7, 4, 3, 3, 2, 1, false},
  };
  return cases;
}

Inputs ConvInputs(const ConvCase& k, uint64_t seed) {
  Inputs in = {UniformLeaf({k.n, k.c, k.h, k.w}, seed), UniformLeaf({k.out, k.c, k.kh, k.kw}, seed + 1)};
  in.push_back(k.bias ? UniformLeaf({k.out}, seed + 2) : Tensor());
  return in;
}

// The conv tests run once per CPU kernel (Note [Conv2d kernel choice]): im2col, and oneDNN's direct and
// Winograd primitives forced for every shape (the default rule sends small-channel and 1x1 convolutions to
// im2col; Winograd falls back to the direct primitives where oneDNN has no Winograd kernel).
class Conv2dTest : public ::testing::TestWithParam<cpu::ConvKernel> {
 protected:
  void SetUp() override { cpu::SetConvKernel(GetParam()); }
  void TearDown() override { cpu::SetConvKernel(cpu::ConvKernel::kAuto); }
};

std::string KernelName(const ::testing::TestParamInfo<cpu::ConvKernel>& info) {
  switch (info.param) {
    case cpu::ConvKernel::kOneDnn: return "OneDnn";
    case cpu::ConvKernel::kWinograd: return "Winograd";
    default: return "Im2Col";
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, Conv2dTest,
                         ::testing::Values(cpu::ConvKernel::kIm2Col, cpu::ConvKernel::kOneDnn,
                                           cpu::ConvKernel::kWinograd),
                         KernelName);

TEST_P(Conv2dTest, ForwardMatchesDirectLoop) {
  uint64_t seed = 100;
  for (const ConvCase& k : ConvCases()) {
    SCOPED_TRACE(::testing::Message() << "n=" << k.n << " c=" << k.c << " h=" << k.h << " w=" << k.w
                                      << " out=" << k.out << " k=" << k.kh << "x" << k.kw
                                      << " stride=" << k.stride << " padding=" << k.padding);
    Inputs in = ConvInputs(k, seed += 3);
    Tensor y = Conv2d(in[0], in[1], in[2], k.stride, k.padding);
    const int64_t oh = (k.h + 2 * k.padding - k.kh) / k.stride + 1;
    const int64_t ow = (k.w + 2 * k.padding - k.kw) / k.stride + 1;
    EXPECT_EQ(y.shape(), (Shape{k.n, k.out, oh, ow}));
    ExpectAllNear(y, ReferenceConv(in[0], in[1], in[2], k), 1e-5f);
  }
}

TEST_P(Conv2dTest, GradCheck) {
  uint64_t seed = 200;
  for (const ConvCase& k : ConvCases()) {
    SCOPED_TRACE(::testing::Message() << "n=" << k.n << " c=" << k.c << " h=" << k.h << " w=" << k.w
                                      << " k=" << k.kh << "x" << k.kw << " stride=" << k.stride
                                      << " padding=" << k.padding);
    Inputs in = ConvInputs(k, seed += 3);
    if (!k.bias) in.pop_back();
    const int64_t stride = k.stride, padding = k.padding;
    EXPECT_GRADCHECK([stride, padding](const Inputs& x) {
      return Conv2d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), stride, padding);
    }, in);
  }
}

TEST_P(Conv2dTest, GradientsOnlyForInputsThatNeedThem) {
  Tensor x = UniformLeaf({2, 3, 6, 6}, 300).Detach();  // like a data batch
  Tensor w = UniformLeaf({4, 3, 3, 3}, 301);
  Tensor y = Conv2d(x, w, Tensor(), 1, 1);
  Sum(y).Backward();
  EXPECT_FALSE(x.grad().defined());
  ASSERT_TRUE(w.grad().defined());
  // d sum(y) / d w[o, c, ki, kj] = sum over images and positions of the input under that tap; the
  // centre tap of w[0, 0] sees every pixel of channel 0.
  EXPECT_NEAR(w.grad().ToVector<float>()[4], Sum(Narrow(x, 1, 0, 1)).item(), 1e-4);
}

TEST_P(Conv2dTest, NonContiguousInput) {
  Tensor x = UniformLeaf({5, 2, 6, 3}, 310);
  Tensor w = UniformLeaf({2, 3, 3, 3}, 311);
  Tensor xt = Transpose(x, 1, 3);  // [5, 3, 6, 2], strided
  Tensor y = Conv2d(xt, w, Tensor(), 1, 1);
  ExpectAllNear(y, ReferenceConv(Contiguous(xt), w, Tensor(), {5, 3, 6, 2, 2, 3, 3, 1, 1, false}), 1e-5f);
  EXPECT_GRADCHECK([](const Inputs& in) { return Conv2d(Transpose(in[0], 1, 3), in[1], Tensor(), 1, 1); },
                   (Inputs{x, w}));
}

// ---------------------------------------------------------------------------------------------------
// MaxPool2d

std::vector<float> ReferenceMaxPool(const Tensor& x, int64_t kernel, int64_t stride) {
  const int64_t planes = x.shape()[0] * x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  const int64_t oh = (h - kernel) / stride + 1, ow = (w - kernel) / stride + 1;
  std::vector<float> xv = x.ToVector<float>(), out;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t z = 0; z < ow; ++z) {
        float best = -INFINITY;
        for (int64_t i = 0; i < kernel; ++i)
          for (int64_t j = 0; j < kernel; ++j)
            best = std::max(best, xv[(p * h + y * stride + i) * w + z * stride + j]);
        out.push_back(best);
      }
  return out;
}

TEST(MaxPool2dTest, ForwardMatchesReferenceAndGradCheck) {
  struct Case {
    Shape shape;
    int64_t kernel, stride;
  };
  const std::vector<Case> cases = {{{1, 1, 4, 4}, 2, 0},  {{3, 2, 7, 5}, 2, 0}, {{2, 3, 9, 7}, 3, 0},
                                   {{2, 2, 7, 8}, 3, 2},  {{1, 3, 6, 5}, 2, 1}, {{3, 1, 5, 9}, 3, 1}};
  uint64_t seed = 400;
  for (const Case& k : cases) {
    SCOPED_TRACE(::testing::Message() << ShapeToString(k.shape) << " kernel " << k.kernel << " stride "
                                      << k.stride);
    Tensor x = DistinctLeaf(k.shape, ++seed);
    Tensor y = MaxPool2d(x, k.kernel, k.stride);
    const int64_t stride = k.stride == 0 ? k.kernel : k.stride;
    EXPECT_EQ(y.shape(), (Shape{k.shape[0], k.shape[1], (k.shape[2] - k.kernel) / stride + 1,
                                (k.shape[3] - k.kernel) / stride + 1}));
    ExpectAllNear(y, ReferenceMaxPool(x, k.kernel, stride), 0.0f);
    const int64_t kernel = k.kernel, s = k.stride;
    EXPECT_GRADCHECK([kernel, s](const Inputs& in) { return MaxPool2d(in[0], kernel, s); }, Inputs{x});
  }
}

TEST(MaxPool2dTest, TiesSendGradientToFirstMaximum) {
  for (int64_t kernel : {2, 3}) {
    Tensor x = Ones({1, 1, 6, 6});
    x.set_requires_grad(true);
    Sum(MaxPool2d(x, kernel)).Backward();
    std::vector<float> g = x.grad().ToVector<float>();
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 6; ++j)
        EXPECT_EQ(g[i * 6 + j], (i % kernel == 0 && j % kernel == 0) ? 1.0f : 0.0f) << i << "," << j;
  }
}

TEST(MaxPool2dTest, OverlappingWindowsAccumulate) {
  // 1x1x1x3 row [0, 5, 1] is too narrow for 2x2; use 2 rows: the 5 is the max of both windows.
  Tensor x = FromVector(Floats{0, 5, 1, 0, 0, 0}, {1, 1, 2, 3});
  x.set_requires_grad(true);
  Tensor y = MaxPool2d(x, 2, 1);
  ExpectAllNear(y, {5, 5}, 0.0f);
  Sum(y).Backward();
  ExpectAllNear(x.grad(), {0, 2, 0, 0, 0, 0}, 0.0f);
}

// The 2x2 / stride 2 forward's vector path (eight outputs at once, a row's last ones masked: rows of 20,
// 14, 7, 17 and 8 outputs) against a scan-order reference, on values drawn from a few levels (so windows
// tie) with NaNs sprinkled in. Forward must give the same values, and backward must send each output's
// gradient to the reference's argmax: the first maximum, or the last NaN of the window in scan order.
TEST(MaxPool2dTest, WidePlanesKeepTheScanOrderArgmax) {
  for (const Shape& shape : {Shape{2, 3, 6, 40}, Shape{1, 2, 4, 28}, Shape{2, 2, 14, 14}, Shape{1, 2, 5, 34},
                             Shape{1, 1, 4, 17}}) {
    SCOPED_TRACE(ShapeToString(shape));
    const int64_t planes = shape[0] * shape[1], h = shape[2], w = shape[3], oh = h / 2, ow = w / 2;
    std::vector<float> xv(planes * h * w);
    for (size_t i = 0; i < xv.size(); ++i) {
      xv[i] = (i * 7919 % 13 == 0) ? NAN : static_cast<float>(i * 2654435761u % 5);
    }
    Tensor x = FromVector(xv, shape);
    x.set_requires_grad(true);
    Tensor y = MaxPool2d(x, 2);
    std::vector<float> weights(planes * oh * ow);
    std::iota(weights.begin(), weights.end(), 1.0f);
    Sum(Mul(y, FromVector(weights, y.shape()))).Backward();
    const std::vector<float> yv = y.ToVector<float>(), gx = x.grad().ToVector<float>();
    std::vector<float> expected_gx(xv.size(), 0.0f);
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t oy = 0; oy < oh; ++oy) {
        for (int64_t ox = 0; ox < ow; ++ox) {
          int64_t best_at = (p * h + 2 * oy) * w + 2 * ox;
          for (int64_t at : {best_at + 1, best_at + w, best_at + w + 1}) {
            if (xv[at] > xv[best_at] || std::isnan(xv[at])) best_at = at;
          }
          const int64_t o = (p * oh + oy) * ow + ox;
          if (std::isnan(xv[best_at])) {
            EXPECT_TRUE(std::isnan(yv[o])) << "output " << o;
          } else {
            EXPECT_EQ(yv[o], xv[best_at]) << "output " << o;
          }
          expected_gx[best_at] += weights[o];
        }
      }
    }
    for (size_t i = 0; i < gx.size(); ++i) EXPECT_EQ(gx[i], expected_gx[i]) << "input " << i;
  }
}

// MaxPool2dOfRelu against the two ops it fuses (Note [ReLU then MaxPool2d in one pass]): values and
// gradients bit for bit, on data that exercises every rule: values from a few levels around 0 (windows
// tie, have no positive value, hold -0.0), NaNs sprinkled in (Relu maps them to 0, so they never win),
// the 2x2 vector path with masked row tails, other kernels and overlapping windows.
TEST(MaxPool2dOfReluTest, MatchesReluThenMaxPoolBitForBit) {
  struct Case {
    Shape shape;
    int64_t kernel, stride;
  };
  const std::vector<Case> cases = {{{2, 3, 6, 40}, 2, 0}, {{1, 2, 4, 28}, 2, 0}, {{2, 2, 14, 14}, 2, 0},
                                   {{1, 2, 5, 34}, 2, 0}, {{1, 1, 4, 17}, 2, 0}, {{2, 2, 7, 8}, 3, 2},
                                   {{1, 3, 6, 5}, 2, 1},  {{3, 1, 5, 9}, 3, 1}};
  const float levels[] = {-2.0f, -1.0f, -0.0f, 0.0f, 1.0f, 2.0f};
  for (const Case& k : cases) {
    SCOPED_TRACE(::testing::Message() << ShapeToString(k.shape) << " kernel " << k.kernel << " stride "
                                      << k.stride);
    std::vector<float> xv(NumElements(k.shape));
    for (size_t i = 0; i < xv.size(); ++i) {
      xv[i] = (i * 7919 % 17 == 0) ? NAN : levels[i * 2654435761u % 6];
    }
    for (size_t i = 0; i < xv.size() / 5; ++i) xv[i] = -std::fabs(xv[i]);  // planes with no positive value
    auto run = [&](bool fused, std::vector<float>* y, std::vector<float>* gx) {
      Tensor x = FromVector(xv, k.shape);
      x.set_requires_grad(true);
      Tensor out = fused ? MaxPool2dOfRelu(x, k.kernel, k.stride) : MaxPool2d(Relu(x), k.kernel, k.stride);
      EXPECT_EQ(out.grad_fn()->name(), fused ? "MaxPool2dOfReluBackward" : "MaxPool2dBackward");
      std::vector<float> weights(out.numel());
      std::iota(weights.begin(), weights.end(), 1.0f);
      Sum(Mul(out, FromVector(weights, out.shape()))).Backward();
      *y = out.ToVector<float>();
      *gx = x.grad().ToVector<float>();
    };
    std::vector<float> y_fused, gx_fused, y_pair, gx_pair;
    run(true, &y_fused, &gx_fused);
    run(false, &y_pair, &gx_pair);
    ASSERT_EQ(y_fused.size(), y_pair.size());
    for (size_t i = 0; i < y_pair.size(); ++i) {
      EXPECT_EQ(std::signbit(y_fused[i]), std::signbit(y_pair[i])) << "output " << i;
      EXPECT_EQ(y_fused[i], y_pair[i]) << "output " << i;
    }
    for (size_t i = 0; i < gx_pair.size(); ++i) EXPECT_EQ(gx_fused[i], gx_pair[i]) << "input " << i;
  }
}

// Conv2dReluMaxPool2d against the three ops (Note [Conv2d, ReLU and MaxPool2d in one op]): values and
// every gradient bit for bit, for groups of one image (conv1 of the MNIST cnn) and of several with a
// partial last group (conv2: 9 images in groups of 4), without bias, with strided convolutions and other
// pools, and with an input that needs no gradient; on one thread and on two.
using Conv2dReluMaxPool2dTest = Conv2dTest;
INSTANTIATE_TEST_SUITE_P(Kernels, Conv2dReluMaxPool2dTest,
                         ::testing::Values(cpu::ConvKernel::kIm2Col, cpu::ConvKernel::kOneDnn), KernelName);

TEST_P(Conv2dReluMaxPool2dTest, MatchesTheThreeOpsBitForBit) {
  struct Case {
    Shape x, w;
    bool bias, x_grad;
    int64_t stride, padding, pool_kernel, pool_stride;
  };
  const std::vector<Case> cases = {
      {{4, 1, 28, 28}, {32, 1, 3, 3}, true, false, 1, 1, 2, 0},
      {{9, 32, 14, 14}, {64, 32, 3, 3}, true, true, 1, 1, 2, 0},
      {{3, 5, 11, 9}, {6, 5, 3, 3}, false, true, 2, 1, 2, 0},
      {{2, 3, 12, 10}, {4, 3, 3, 3}, true, true, 1, 0, 3, 2},
      {{2, 2, 8, 8}, {3, 2, 2, 2}, true, true, 1, 0, 2, 1},
  };
  uint64_t seed = 900;
  for (int threads : {1, 2}) {
    for (const Case& k : cases) {
      SCOPED_TRACE(::testing::Message() << "x " << ShapeToString(k.x) << " w " << ShapeToString(k.w)
                                        << " stride " << k.stride << " pool " << k.pool_kernel << "/"
                                        << k.pool_stride << " threads " << threads);
      const int previous_threads = GetNumThreads();
      SetNumThreads(threads);
      Generator gen(++seed);
      const Tensor x0 = Uniform(k.x, -1.0f, 1.0f, gen), w0 = Uniform(k.w, -0.5f, 0.5f, gen);
      const Tensor b0 = Uniform({k.w[0]}, -0.5f, 0.5f, gen);
      struct Result {
        std::vector<float> y, gx, gw, gb;
      };
      auto run = [&](bool fused) {
        Tensor x = Clone(x0), w = Clone(w0), b = k.bias ? Clone(b0) : Tensor();
        x.set_requires_grad(k.x_grad);
        w.set_requires_grad(true);
        if (k.bias) b.set_requires_grad(true);
        Tensor y = fused ? Conv2dReluMaxPool2d(x, w, b, k.stride, k.padding, k.pool_kernel, k.pool_stride)
                         : MaxPool2d(Relu(Conv2d(x, w, b, k.stride, k.padding)), k.pool_kernel,
                                     k.pool_stride);
        EXPECT_EQ(y.grad_fn()->name(), fused ? "Conv2dReluMaxPool2dBackward" : "MaxPool2dBackward");
        std::vector<float> weights(y.numel());
        for (size_t i = 0; i < weights.size(); ++i) weights[i] = 0.25f + static_cast<float>(i % 7);
        Sum(Mul(y, FromVector(weights, y.shape()))).Backward();
        return Result{y.ToVector<float>(), k.x_grad ? x.grad().ToVector<float>() : std::vector<float>{},
                      w.grad().ToVector<float>(), k.bias ? b.grad().ToVector<float>() : std::vector<float>{}};
      };
      const Result fused = run(true), ops = run(false);
      SetNumThreads(previous_threads);
      EXPECT_EQ(fused.y, ops.y);
      EXPECT_EQ(fused.gx, ops.gx);
      EXPECT_EQ(fused.gw, ops.gw);
      EXPECT_EQ(fused.gb, ops.gb);
      EXPECT_FALSE(ops.gw.empty());
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// BatchNorm

struct BnReference {
  std::vector<float> y;
  std::vector<double> mean, biased_var, unbiased_var;
};

BnReference ReferenceBatchNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  const int64_t n = x.shape()[0], c = x.shape()[1], inner = x.numel() / (n * c), count = n * inner;
  std::vector<float> xv = x.ToVector<float>(), wv = weight.ToVector<float>(), bv = bias.ToVector<float>();
  BnReference r;
  r.y.resize(xv.size());
  for (int64_t ch = 0; ch < c; ++ch) {
    double total = 0.0, squares = 0.0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < inner; ++j) total += xv[(i * c + ch) * inner + j];
    const double mean = total / count;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < inner; ++j) squares += std::pow(xv[(i * c + ch) * inner + j] - mean, 2);
    r.mean.push_back(mean);
    r.biased_var.push_back(squares / count);
    r.unbiased_var.push_back(squares / (count - 1));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < inner; ++j) {
        const int64_t e = (i * c + ch) * inner + j;
        r.y[e] = static_cast<float>((xv[e] - mean) / std::sqrt(squares / count + eps) * wv[ch] + bv[ch]);
      }
  }
  return r;
}

TEST(BatchNormTest, TrainingNormalisesWithBatchStatsAndUpdatesRunningStats) {
  for (const Shape& shape : {Shape{4, 3, 5, 2}, Shape{6, 4}}) {
    SCOPED_TRACE(ShapeToString(shape));
    const int64_t c = shape[1];
    Tensor x = UniformLeaf(shape, 500, -2.0f, 3.0f);
    Tensor weight = UniformLeaf({c}, 501, 0.5f, 1.5f), bias = UniformLeaf({c}, 502);
    Tensor running_mean = UniformLeaf({c}, 503).Detach(), running_var = UniformLeaf({c}, 504, 0.5f, 2.0f).Detach();
    const std::vector<float> mean0 = running_mean.ToVector<float>(), var0 = running_var.ToVector<float>();
    Tensor y = BatchNorm(x, weight, bias, running_mean, running_var, true, 0.1f, 1e-5f);
    const BnReference r = ReferenceBatchNorm(x, weight, bias, 1e-5f);
    ExpectAllNear(y, r.y, 1e-5f);
    std::vector<float> expected_mean, expected_var;
    for (int64_t ch = 0; ch < c; ++ch) {
      expected_mean.push_back(static_cast<float>(0.9 * mean0[ch] + 0.1 * r.mean[ch]));
      expected_var.push_back(static_cast<float>(0.9 * var0[ch] + 0.1 * r.unbiased_var[ch]));
    }
    ExpectAllNear(running_mean, expected_mean, 1e-6f);
    ExpectAllNear(running_var, expected_var, 1e-6f);
  }
}

TEST(BatchNormTest, TrainingWithoutRunningStatsAndWithoutAffine) {
  Tensor x = UniformLeaf({5, 2, 3, 3}, 510);
  Tensor y = BatchNorm(x, Tensor(), Tensor(), Tensor(), Tensor(), true);
  const BnReference r = ReferenceBatchNorm(x, Ones({2}), Zeros({2}), 1e-5f);
  ExpectAllNear(y, r.y, 1e-5f);
  EXPECT_GRADCHECK([](const Inputs& in) { return BatchNorm(in[0], Tensor(), Tensor(), Tensor(), Tensor(), true); },
                   Inputs{x});
}

TEST(BatchNormTest, EvalUsesRunningStats) {
  Tensor x = UniformLeaf({3, 2, 2, 2}, 520);
  Tensor weight = FromVector(Floats{2.0f, 0.5f}, {2}), bias = FromVector(Floats{1.0f, -1.0f}, {2});
  Tensor running_mean = FromVector(Floats{0.5f, -0.25f}, {2}), running_var = FromVector(Floats{4.0f, 0.25f}, {2});
  Tensor y = BatchNorm(x, weight, bias, running_mean, running_var, false, 0.1f, 0.0f);
  std::vector<float> xv = x.ToVector<float>(), expected(xv.size());
  for (size_t e = 0; e < xv.size(); ++e) {
    const int64_t ch = (e / 4) % 2;
    expected[e] = ch == 0 ? (xv[e] - 0.5f) / 2.0f * 2.0f + 1.0f : (xv[e] + 0.25f) / 0.5f * 0.5f - 1.0f;
  }
  ExpectAllNear(y, expected, 1e-6f);
  ExpectAllNear(running_mean, {0.5f, -0.25f}, 0.0f);  // untouched
  ExpectAllNear(running_var, {4.0f, 0.25f}, 0.0f);
}

TEST(BatchNormTest, GradCheckTrainingAndEval) {
  for (const Shape& shape : {Shape{3, 2, 3, 4}, Shape{1, 3, 2, 3}, Shape{5, 3}}) {
    SCOPED_TRACE(ShapeToString(shape));
    const int64_t c = shape[1];
    Inputs in = {UniformLeaf(shape, 530, -2.0f, 2.0f), UniformLeaf({c}, 531, 0.5f, 1.5f), UniformLeaf({c}, 532)};
    Tensor running_mean = UniformLeaf({c}, 533).Detach(), running_var = UniformLeaf({c}, 534, 0.5f, 2.0f).Detach();
    for (bool training : {true, false}) {
      SCOPED_TRACE(training ? "training" : "eval");
      EXPECT_GRADCHECK([=](const Inputs& x) {
        return BatchNorm(x[0], x[1], x[2], running_mean, running_var, training, 0.1f, 1e-5f);
      }, in);
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Dropout

TEST(DropoutTest, StatisticsScaleAndReproducibility) {
  const int64_t n = 200000;
  for (float p : {0.1f, 0.5f, 0.8f}) {
    SCOPED_TRACE(p);
    Tensor x = Ones({n});
    Generator g(7);
    std::vector<float> y = Dropout(x, p, true, g).ToVector<float>();
    const int64_t zeros = std::count(y.begin(), y.end(), 0.0f);
    EXPECT_NEAR(static_cast<double>(zeros) / n, p, 0.005);
    for (float v : y) ASSERT_TRUE(v == 0.0f || std::abs(v - 1.0f / (1.0f - p)) < 1e-6f) << v;
    Generator same(7), other(8);
    EXPECT_EQ(Dropout(x, p, true, same).ToVector<float>(), y);
    EXPECT_NE(Dropout(x, p, true, other).ToVector<float>(), y);
  }
}

TEST(DropoutTest, IdentityWhenEvalOrZeroAndZerosWhenOne) {
  Tensor x = UniformLeaf({3, 4}, 600);
  Generator g(1);
  EXPECT_TRUE(Dropout(x, 0.5f, false, g).is_same(x));
  EXPECT_TRUE(Dropout(x, 0.0f, true, g).is_same(x));
  Tensor y = Dropout(x, 1.0f, true, g);
  ExpectAllNear(y, std::vector<float>(12, 0.0f), 0.0f);
  Sum(y).Backward();
  ExpectAllNear(x.grad(), std::vector<float>(12, 0.0f), 0.0f);
}

TEST(DropoutTest, BackwardUsesTheForwardMask) {
  Tensor x = UniformLeaf({50, 20}, 610, 0.5f, 1.5f);
  Generator g(3);
  Tensor y = Dropout(x, 0.4f, true, g);
  Sum(y).Backward();
  std::vector<float> yv = y.ToVector<float>(), xv = x.ToVector<float>(), gv = x.grad().ToVector<float>();
  for (size_t i = 0; i < yv.size(); ++i) ASSERT_NEAR(gv[i], yv[i] / xv[i], 1e-5f) << i;
  EXPECT_GRADCHECK([](const Inputs& in) {
    Generator fixed(11);
    return Dropout(in[0], 0.3f, true, fixed);
  }, Inputs{UniformLeaf({4, 6}, 611)});
}

// ---------------------------------------------------------------------------------------------------
// Shape errors name the shapes.

TEST(ConvPoolNormDeathTest, BadShapesAreNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(Conv2d(Zeros({2, 3, 5, 5}), Zeros({4, 2, 3, 3}), Tensor()),
               "Conv2d: input \\[2, 3, 5, 5\\] \\[n, c, h, w\\] does not match weight \\[4, 2, 3, 3\\]");
  EXPECT_DEATH(Conv2d(Zeros({3, 5, 5}), Zeros({4, 3, 3, 3}), Tensor()), "Conv2d: input \\[3, 5, 5\\]");
  EXPECT_DEATH(Conv2d(Zeros({2, 3, 5, 5}), Zeros({4, 3, 3, 3}), Zeros({3})),
               "Conv2d: bias \\[3\\] for weight \\[4, 3, 3, 3\\]");
  EXPECT_DEATH(Conv2d(Zeros({1, 1, 2, 2}), Zeros({1, 1, 3, 3}), Tensor()),
               "kernel 3x3 larger than padded input \\[1, 1, 2, 2\\]");
  EXPECT_DEATH(MaxPool2d(Zeros({1, 1, 2, 5}), 3), "MaxPool2d: kernel 3 larger than input \\[1, 1, 2, 5\\]");
  EXPECT_DEATH(MaxPool2d(Zeros({4, 4}), 2), "MaxPool2d expects \\[n, c, h, w\\], got \\[4, 4\\]");
  EXPECT_DEATH(BatchNorm(Zeros({2, 3, 4, 4}), Ones({4}), Tensor(), Tensor(), Tensor(), true),
               "BatchNorm: weight \\[4\\] does not match the channels of input \\[2, 3, 4, 4\\]");
  EXPECT_DEATH(BatchNorm(Zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true),
               "more than 1 value per channel when training, got input \\[1, 3\\]");
  Generator g(0);
  EXPECT_DEATH(Dropout(Zeros({2}), 1.5f, true, g), "Dropout: probability 1.5 is outside \\[0, 1\\]");
}

}  // namespace
}  // namespace ddp
