// How far each float32 CPU convolution kernel's results lie from exact ones: for ResNet-18's convolutions
// on 28x28 images, Conv2d's output and both gradients under each kernel (cpu::SetConvKernel) against a
// direct loop in double precision, as the relative RMS error (||result - exact|| / ||exact||) and the
// largest error over the largest exact magnitude. The inputs are ReLU outputs (half zeros, half |N(0,1)|),
// Kaiming-normal weights and N(0, 1e-3) output gradients, as in training. Prints one row per shape and
// kernel, with the implementation that ran (cpu::OneDnnConvImplementation).
//   bazel-bin/bench/conv_error [seed]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tensor/conv_onednn.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/conv_reference.h"

namespace ddp {
namespace {

// One convolution of ResNet-18 on 28x28 images: n images of c channels, side x side, to `out` channels.
struct ConvShape {
  const char* name;
  int64_t n, c, side, out, stride;
};

// "relative RMS error / largest error over the largest exact magnitude" of `result` against `exact`.
std::string Errors(const std::vector<float>& result, const std::vector<double>& exact) {
  double squared_error = 0.0, squared_exact = 0.0, largest_error = 0.0, largest_exact = 0.0;
  for (size_t i = 0; i < exact.size(); ++i) {
    const double error = result[i] - exact[i];
    squared_error += error * error;
    squared_exact += exact[i] * exact[i];
    largest_error = std::max(largest_error, std::fabs(error));
    largest_exact = std::max(largest_exact, std::fabs(exact[i]));
  }
  char text[64];
  std::snprintf(text, sizeof(text), "%.2e / %.2e", std::sqrt(squared_error / squared_exact),
                largest_error / largest_exact);
  return text;
}

void MeasureShape(const ConvShape& shape, std::mt19937& rng) {
  const int64_t out_side = (shape.side + 2 - 3) / shape.stride + 1;
  const cpu::ConvGeometry g{shape.n, shape.c,      shape.side, shape.side, shape.out, 3,
                            3,       shape.stride, 1,          out_side,   out_side};
  std::normal_distribution<float> normal;
  std::vector<float> x(g.n * g.c * g.h * g.w), w(g.out * g.c * 9), gy(g.n * g.out * g.oh * g.ow);
  for (float& v : x) v = std::max(0.0f, normal(rng));
  const float kaiming = std::sqrt(2.0f / static_cast<float>(9 * g.c));
  for (float& v : w) v = normal(rng) * kaiming;
  for (float& v : gy) v = normal(rng) * 1e-3f;
  const ConvReference exact = DirectConvolution(x, w, gy, g);
  struct Kernel {
    const char* name;
    cpu::ConvKernel kernel;
  };
  for (const Kernel k :
       {Kernel{"im2col", cpu::ConvKernel::kIm2Col}, Kernel{"onednn", cpu::ConvKernel::kOneDnn},
        Kernel{"winograd", cpu::ConvKernel::kWinograd},
        Kernel{"winograd_avx2", cpu::ConvKernel::kWinogradAvx2}}) {
    cpu::SetConvKernel(k.kernel);
    Tensor xt = FromVector(x, {g.n, g.c, g.h, g.w}), wt = FromVector(w, {g.out, g.c, 3, 3});
    xt.set_requires_grad(true);
    wt.set_requires_grad(true);
    Tensor y = Conv2d(xt, wt, Tensor(), g.stride, g.padding);
    y.Backward(FromVector(gy, y.shape()));
    const std::string implementation =
        k.kernel == cpu::ConvKernel::kIm2Col ? "im2col" : cpu::OneDnnConvImplementation(g);
    std::printf("%-22s n=%-3ld %-14s %-22s | y %s | gx %s | gw %s\n", shape.name, static_cast<long>(g.n),
                k.name, implementation.c_str(), Errors(y.ToVector<float>(), exact.y).c_str(),
                Errors(xt.grad().ToVector<float>(), exact.gx).c_str(),
                Errors(wt.grad().ToVector<float>(), exact.gw).c_str());
  }
  cpu::SetConvKernel(cpu::ConvKernel::kAuto);
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  std::mt19937 rng(argc > 1 ? static_cast<unsigned>(std::strtoul(argv[1], nullptr, 10)) : 1u);
  std::printf("errors: relative RMS / largest over the largest exact magnitude, against a double loop\n");
  // Batches sized so that each shape has thousands of output pixels per channel, at a few seconds per loop.
  for (const ddp::ConvShape& shape : {ddp::ConvShape{"layer1 64->64 28x28", 16, 64, 28, 64, 1},
                                      ddp::ConvShape{"layer2 128->128 14x14", 16, 128, 14, 128, 1},
                                      ddp::ConvShape{"layer2a 64->128 s2", 16, 64, 28, 128, 2},
                                      ddp::ConvShape{"layer3 256->256 7x7", 32, 256, 7, 256, 1},
                                      ddp::ConvShape{"layer4 512->512 4x4", 64, 512, 4, 512, 1}}) {
    MeasureShape(shape, rng);
  }
  return 0;
}
