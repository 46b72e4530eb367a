// Micro-benchmark of im2col (tensor/im2col.h) at ResNet-18's convolution shapes (28x28 images, batch 64),
// bf16 and float32: the time to unfold the whole batch, group after group of images (ImagesPerGroup, as
// the forward and weight-gradient passes do), into one reused col buffer. Prints the group size,
// milliseconds per batch (median and minimum of 20 runs) and the rate at which col is written.
//   bazel run -c opt //tensor:im2col_bench -- [label substring]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tensor/im2col.h"

namespace ddp {
namespace cpu {
namespace {

struct Shape {
  const char* label;
  int64_t c, out, size, k, stride;
};

template <typename T>
void Time(const char* type, const Shape& s) {
  const int64_t n = 64, pad = s.k / 2, o = (s.size + 2 * pad - s.k) / s.stride + 1;
  const ConvGeometry g{n, s.c, s.size, s.size, s.out, s.k, s.k, s.stride, pad, o, o};
  const int64_t group = ImagesPerGroup(g);
  std::vector<T> x(static_cast<size_t>(n * s.c * s.size * s.size));
  for (size_t i = 0; i < x.size(); ++i) std::memcpy(&x[i], &i, sizeof(T) < sizeof(i) ? sizeof(T) : sizeof(i));
  std::vector<T> col(static_cast<size_t>(g.K() * g.P() * group));
  std::vector<double> times;
  for (int iter = 0; iter < 23; ++iter) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t first = 0; first < n; first += group)
      Im2ColGroup(x.data(), g, first, std::min(group, n - first), col.data());
    if (iter >= 3)
      times.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  const double bytes = static_cast<double>(n * g.K() * g.P() * sizeof(T));
  std::printf("%-22s %-5s group %2ld %8.3f ms (min %8.3f)  %6.1f GB/s\n", s.label, type,
              static_cast<long>(group), times[times.size() / 2], times[0], bytes / times[0] / 1e6);
}

}  // namespace
}  // namespace cpu
}  // namespace ddp

int main(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : "";
  const ddp::cpu::Shape shapes[] = {
      {"conv1 3 3x3 28", 3, 64, 28, 3, 1},        {"l1 64 3x3 28", 64, 64, 28, 3, 1},
      {"l2a 64 3x3 s2 28", 64, 128, 28, 3, 2},    {"l2ds 64 1x1 s2 28", 64, 128, 28, 1, 2},
      {"l2 128 3x3 14", 128, 128, 14, 3, 1},      {"l3a 128 3x3 s2 14", 128, 256, 14, 3, 2},
      {"l3ds 128 1x1 s2 14", 128, 256, 14, 1, 2}, {"l3 256 3x3 7", 256, 256, 7, 3, 1},
      {"l4a 256 3x3 s2 7", 256, 512, 7, 3, 2},    {"l4ds 256 1x1 s2 7", 256, 512, 7, 1, 2},
      {"l4 512 3x3 4", 512, 512, 4, 3, 1},
  };
  for (const auto& s : shapes) {
    if (std::strstr(s.label, filter) == nullptr) continue;
    ddp::cpu::Time<ddp::BFloat16>("bf16", s);
    ddp::cpu::Time<float>("fp32", s);
  }
  return 0;
}
