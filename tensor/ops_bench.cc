// Micro-benchmark of the element-wise ops, reductions, dropout and losses at the sizes of an MLP training
// step (batch 64, 512 hidden units, 10 classes), forward and forward+backward, of ReLU + 2x2 max pooling
// at the MNIST cnn's two sizes, and of the in-place ops the optimizers and the Reducer run on a 512x784
// parameter. Prints microseconds per call: the median and the minimum of 15 samples of `reps` calls each
// (the minimum is the steadier number on a shared machine).
//   bazel run //tensor:ops_bench -- [label substring]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tensor/autograd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/pool_kernels.h"

namespace ddp {
namespace {

const char* g_filter = "";  // run only the cases whose label contains this (argv[1])

// Times `fn` (median and minimum over 15 samples of `reps` calls) and prints one line.
void Report(const char* label, int reps, const std::function<void()>& fn) {
  if (std::strstr(label, g_filter) == nullptr) return;
  for (int i = 0; i < reps; ++i) fn();
  std::vector<double> samples;
  for (int s = 0; s < 15; ++s) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) fn();
    const auto elapsed = std::chrono::steady_clock::now() - start;
    samples.push_back(std::chrono::duration<double, std::micro>(elapsed).count() / reps);
  }
  std::sort(samples.begin(), samples.end());
  std::printf("%-28s %9.3f us (min %9.3f us)\n", label, samples[samples.size() / 2], samples[0]);
}

Tensor Leaf(const Shape& shape, Generator& gen, float low = -1.0f, float high = 1.0f) {
  Tensor t = Uniform(shape, low, high, gen);
  t.set_requires_grad(true);
  return t;
}

void ElementWise(Generator& gen) {
  Tensor a = Leaf({64, 512}, gen), b = Leaf({64, 512}, gen), bias = Leaf({512}, gen);
  Tensor positive = Leaf({64, 512}, gen, 0.5f, 2.0f);
  Report("Add", 200, [&] { NoGradGuard g; Add(a, b); });
  Report("Add broadcast", 200, [&] { NoGradGuard g; Add(a, bias); });
  Report("Mul", 200, [&] { NoGradGuard g; Mul(a, b); });
  Report("Div", 200, [&] { NoGradGuard g; Div(a, positive); });
  Report("MulScalar", 200, [&] { NoGradGuard g; MulScalar(a, 0.5f); });
  Report("Relu", 200, [&] { NoGradGuard g; Relu(a); });
  Report("Exp", 200, [&] { NoGradGuard g; Exp(a); });
  Report("Add fwd+bwd", 100, [&] { Sum(Add(a, bias)).Backward(); });
  Report("Mul fwd+bwd", 100, [&] { Sum(Mul(a, b)).Backward(); });
  Report("Relu fwd+bwd", 100, [&] { Sum(Relu(a)).Backward(); });
  Report("Sqrt fwd+bwd", 100, [&] { Sum(Sqrt(positive)).Backward(); });
}

void Reductions(Generator& gen) {
  Tensor a = Leaf({64, 512}, gen);
  Report("Sum", 200, [&] { NoGradGuard g; Sum(a); });
  Report("Sum dim0", 200, [&] { NoGradGuard g; Sum(a, {0}); });
  Report("Sum fwd+bwd", 100, [&] { Sum(a).Backward(); });
  Report("Sum dim0 fwd+bwd", 100, [&] { Sum(Sum(a, {0})).Backward(); });
  Generator dropout_gen(1);
  Report("Dropout", 200, [&] { NoGradGuard g; Dropout(a, 0.5f, true, dropout_gen); });
  Report("Dropout fwd+bwd", 100, [&] { Sum(Dropout(a, 0.5f, true, dropout_gen)).Backward(); });
}

void Losses(Generator& gen) {
  Tensor logits = Leaf({64, 10}, gen, -3.0f, 3.0f);
  std::vector<int64_t> labels(64);
  for (int64_t i = 0; i < 64; ++i) labels[i] = (i * 7) % 10;
  Tensor target = FromVector(labels, {64});
  Report("LogSoftmax", 1000, [&] { NoGradGuard g; LogSoftmax(logits, 1); });
  Report("CrossEntropy", 1000, [&] { NoGradGuard g; CrossEntropy(logits, target); });
  Report("CrossEntropy fwd+bwd", 500, [&] { CrossEntropy(logits, target).Backward(); });
  Report("NllLoss(LogSoftmax) f+b", 500, [&] { NllLoss(LogSoftmax(logits, 1), target).Backward(); });
}

// MaxPool2dOfRelu, 2x2 stride 2, on the cnn's conv1 and conv2 outputs at batch 64, and the plane
// kernels of its backward alone (what Conv2dReluMaxPool2d's backward runs plane by plane), on one thread.
void Pooling(Generator& gen) {
  Tensor conv1 = Uniform({64, 32, 28, 28}, -1.0f, 1.0f, gen),
         conv2 = Uniform({64, 64, 14, 14}, -1.0f, 1.0f, gen);
  Report("MaxPool2dOfRelu 28x28", 20, [&] {
    NoGradGuard g;
    MaxPool2dOfRelu(conv1, 2);
  });
  Report("MaxPool2dOfRelu 14x14", 20, [&] {
    NoGradGuard g;
    MaxPool2dOfRelu(conv2, 2);
  });
  for (const Tensor* x : {&conv1, &conv2}) {
    const cpu::PoolGeometry g = cpu::CheckPoolShapes(x->shape(), 2, 2);
    const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
    std::vector<float> y(static_cast<size_t>(g.planes * out_plane)),
        gx(static_cast<size_t>(g.planes * in_plane));
    std::vector<int32_t> index(y.size());
    for (int64_t p = 0; p < g.planes; ++p) {
      cpu::MaxPoolPlane(x->data<float>() + p * in_plane, g, /*relu=*/true, y.data() + p * out_plane,
                        index.data() + p * out_plane);
    }
    const std::string label = "MaxPoolBackwardPlane " + std::to_string(g.h) + "x" + std::to_string(g.w);
    Report(label.c_str(), 20, [&] {
      for (int64_t p = 0; p < g.planes; ++p) {
        cpu::MaxPoolBackwardPlane(y.data() + p * out_plane, index.data() + p * out_plane, g,
                                  gx.data() + p * in_plane);
      }
    });
  }
}

void InPlace(Generator& gen) {
  Tensor param = Uniform({512, 784}, -1.0f, 1.0f, gen), grad = Uniform({512, 784}, -1.0f, 1.0f, gen);
  Report("AddInPlace", 100, [&] { AddInPlace(param, grad, -1e-3f); });
  Report("MulScalarInPlace", 100, [&] { MulScalarInPlace(param, 1.0f); });
  Report("CopyScaledInPlace", 100, [&] { CopyScaledInPlace(param, grad, 0.5f); });
  Report("FillInPlace 0", 100, [&] { FillInPlace(param, 0.0f); });
  Report("FillInPlace 1", 100, [&] { FillInPlace(param, 1.0f); });
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  if (argc > 1) ddp::g_filter = argv[1];
  ddp::Generator gen(0);
  ddp::ElementWise(gen);
  ddp::Reductions(gen);
  ddp::Losses(gen);
  ddp::Pooling(gen);
  ddp::InPlace(gen);
  return 0;
}
