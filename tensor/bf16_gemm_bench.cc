// GEMM speed at training shapes: float32 cpu::Gemm against the two bf16 kernels of tensor/cpu_gemm_bf16.h
// (Note [bf16 GEMM kernel choice]), single-threaded unless told otherwise. Prints one line per shape and
// kernel with GFLOP/s (best of the repetitions).
//
//   bazel run //tensor:bf16_gemm_bench -- [threads]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tensor/bf16_convert.h"
#include "tensor/cpu_gemm.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/threads.h"

namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <typename Fn>
double BestGflops(int64_t m, int64_t n, int64_t k, Fn fn) {
  const int reps = std::max<int64_t>(3, static_cast<int64_t>(2e9 / (2.0 * m * n * k)));
  double best = 1e30;
  fn();  // warm-up: plans, scratch
  for (int r = 0; r < reps; ++r) {
    const double start = Seconds();
    fn();
    best = std::min(best, Seconds() - start);
  }
  return 2.0 * m * n * k / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  ddp::SetNumThreads(argc > 1 ? std::atoi(argv[1]) : 1);
  // {m, n, k, trans_b}: mlp fc1 forward; cnn conv2 forward at 4 images per group; resnet18's convolution
  // forwards on im2col (layer1 and layer2 at one image, layer3 at 5 images, layer4 at 32) and its layer3
  // and layer4 weight gradients on im2col (B = the unfolded rows, transposed); a large square.
  const std::vector<std::vector<int64_t>> shapes = {
      {64, 512, 784, 0},   {64, 784, 288, 0},   {64, 784, 576, 0},
      {128, 196, 1152, 0}, {256, 245, 2304, 0}, {512, 512, 4608, 0},
      {256, 2304, 245, 1}, {512, 4608, 512, 1}, {1024, 1024, 1024, 0}};
  for (const auto& s : shapes) {
    const int64_t m = s[0], n = s[1], k = s[2];
    const bool trans_b = s[3] != 0;
    const int64_t ldb = trans_b ? k : n;
    std::vector<float> a(m * k), b(k * n), c(m * n);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 37) % 101) / 101.0f - 0.5f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 53) % 103) / 103.0f - 0.5f;
    std::vector<ddp::BFloat16> ab(a.size()), bb(b.size());
    ddp::cpu::FloatToBFloat16Array(a.data(), ab.data(), a.size());
    ddp::cpu::FloatToBFloat16Array(b.data(), bb.data(), b.size());
    const double f32 = BestGflops(m, n, k, [&] {
      ddp::cpu::Gemm(false, trans_b, m, n, k, 1.0f, a.data(), k, b.data(), ldb, 0.0f, c.data(), n);
    });
    double bf16[2];
    int i = 0;
    for (auto kernel : {ddp::cpu::Bf16GemmKernel::kOneDnn, ddp::cpu::Bf16GemmKernel::kFloat32}) {
      ddp::cpu::SetBf16GemmKernel(kernel);
      bf16[i++] = BestGflops(m, n, k, [&] {
        ddp::cpu::Gemm(false, trans_b, m, n, k, 1.0f, ab.data(), k, bb.data(), ldb, 0.0f, c.data(), n);
      });
    }
    std::printf("m=%ld n=%ld k=%ld%s  fp32 %.1f GFLOP/s  bf16 onednn %.1f  bf16 fp32-of-rounded %.1f\n",
                static_cast<long>(m), static_cast<long>(n), static_cast<long>(k), trans_b ? " B^T" : "", f32,
                bf16[0], bf16[1]);
  }
  return 0;
}
