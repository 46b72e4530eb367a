// How close BatchNorm's channels-last training passes come to what one core can move through memory: the
// forward (BatchNormAddRelu's: statistics, then relu(normalize + residual) with the bf16 copy and ReLU mask
// bytes) and the backward (masked sums, then the input gradient with its bf16 copy) of
// tensor/batch_norm_channels_last.h at ResNet-18's four activation shapes (batch 64, 28x28 images), against
// a plain read and a plain copy (memcpy) of an activation-sized buffer on the same thread in the same run.
// Prints milliseconds (best of `reps`) and the bytes each moves per second, counting every pass over every
// array: the forward reads x three times (two statistics passes and the output pass) and the residual once
// and writes y, the copy and the mask (23 bytes an element); the backward reads the gradient, the mask and
// x twice and writes the input gradient and its copy (24 bytes an element).
//
//   chrt -f 5 taskset -c 1 bazel-bin/tensor/batch_norm_bench [reps (default 20)]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/batch_norm_channels_last.h"
#include "tensor/bench_best_time.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"
#include "tensor/threads.h"

namespace {

namespace bn = ddp::batch_norm_channels_last;

int g_reps = 20;

constexpr double kForwardBytesPerElement = 3 * 4 + 4 + 4 + 2 + 1;
constexpr double kBackwardBytesPerElement = 2 * (4 + 1 + 4) + 4 + 2;

double GigabytesPerSecond(double bytes, double ms) { return bytes / (ms * 1e6); }

// One activation shape's forward and backward, and the plain read and copy of a buffer of its size.
void Run(const char* name, int64_t rows, int64_t channels) {
  const int64_t n = rows * channels;
  std::vector<float> x(n), residual(n), y(n), gy(n), gx(n), mean(channels), var(channels), invstd(channels),
      sum_g(channels), sum_gx(channels);
  std::vector<ddp::BFloat16> copy(n), gx_copy(n);
  std::vector<uint8_t> mask(n);
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = normal(gen);
    residual[i] = normal(gen);
    gy[i] = normal(gen);
  }
  const ddp::Tensor unit;  // weight 1, bias 0
  const bn::ForwardArrays forward{x.data(),      residual.data(), mean.data(), var.data(),
                                  invstd.data(), y.data(),        copy.data(), mask.data()};
  const bn::BackwardArrays backward{gy.data(), mask.data(),  x.data(),      mean.data(), invstd.data(),
                                    nullptr,   sum_g.data(), sum_gx.data(), gx.data(),   gx_copy.data()};
  const double forward_ms =
      ddp::BestMs(g_reps, [&] { bn::TrainingForward(rows, channels, 1e-5f, unit, unit, true, forward); });
  const double backward_ms =
      ddp::BestMs(g_reps, [&] { bn::TrainingBackward(rows, channels, unit, backward); });
  volatile float sink = 0.0f;
  const double read_ms = ddp::BestMs(g_reps, [&] {
    float lanes[16] = {};
    for (int64_t i = 0; i + 16 <= n; i += 16) {
      for (int j = 0; j < 16; ++j) lanes[j] += x[i + j];
    }
    sink = sink + lanes[0];
  });
  const double copy_ms = ddp::BestMs(g_reps, [&] { std::memcpy(gx.data(), x.data(), sizeof(float) * n); });
  const double bytes = static_cast<double>(sizeof(float) * n);
  std::printf(
      "%-24s forward %6.3f ms %5.1f GB/s, backward %6.3f ms %5.1f GB/s; plain read %5.1f GB/s, "
      "memcpy %5.1f GB/s (read + write)\n",
      name, forward_ms, GigabytesPerSecond(n * kForwardBytesPerElement, forward_ms), backward_ms,
      GigabytesPerSecond(n * kBackwardBytesPerElement, backward_ms), GigabytesPerSecond(bytes, read_ms),
      GigabytesPerSecond(2 * bytes, copy_ms));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_reps = std::max(1, std::atoi(argv[1]));
  ddp::SetNumThreads(1);
  std::printf("BatchNorm channels-last passes, one thread, batch 64, best of %d\n", g_reps);
  Run("layer1 [50176, 64]", 64 * 28 * 28, 64);
  Run("layer2 [12544, 128]", 64 * 14 * 14, 128);
  Run("layer3 [3136, 256]", 64 * 7 * 7, 256);
  Run("layer4 [1024, 512]", 64 * 4 * 4, 512);
  return 0;
}
