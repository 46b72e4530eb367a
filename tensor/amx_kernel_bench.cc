// The engine's own AMX convolution kernels against the paths they stand in for, at ResNet-18's 3x3 shapes
// (batch 64, 28x28 and 32x32 images) and one larger map, one call at a time on the kernel threads: the
// engine's channels-last bf16 forward (ConvForwardChannelsLast, its own kernel choice) against the same
// call with ForwardAlgorithm::kRows (the unfolded rows on oneDNN's matmul; where the one-row kernel of
// tensor/conv_amx.h computes the convolution, K <= 1152, kRows keeps it, as it gives the rows' bits), and
// the kernels alone: the one-row kernel and the grid kernel (tensor/conv_amx_grid_forward.h, the weights
// already reordered); the input gradient on AMX tiles against oneDNN's backward-data primitive; and the
// weight gradient on AMX tiles against the unfolded rows it stands in for. Prints
// milliseconds per call, the best of `reps` calls each, whether the outputs agree bit for bit, and which the
// engine takes. On a CPU without AMX it says so and stops.
//
//   chrt -f 5 taskset -c 1 bazel-bin/tensor/amx_kernel_bench [threads (default 1)] [reps (default 15)]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/bench_best_time.h"
#include "tensor/conv_amx.h"
#include "tensor/conv_amx_grid_forward.h"
#include "tensor/conv_amx_input_gradient.h"
#include "tensor/conv_amx_weight_gradient.h"
#include "tensor/conv_channels_last.h"
#include "tensor/conv_forward_by_pixel_class.h"
#include "tensor/conv_onednn.h"
#include "tensor/conv_weight_gradient_by_tap.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/threads.h"

namespace {

using ddp::BFloat16;
using ddp::cpu::ConvGeometry;

int g_reps = 15;

ConvGeometry Geometry(int64_t c, int64_t hw, int64_t out, int64_t stride) {
  ConvGeometry g{64, c, hw, hw, out, 3, 3, stride, 1, (hw - 1) / stride + 1, (hw - 1) / stride + 1};
  g.channels_last = true;
  return g;
}

std::vector<BFloat16> RandomBf16(int64_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<BFloat16> out(count);
  for (BFloat16& v : out) v.bits = static_cast<uint16_t>(0x3e00 + gen() % 512);  // 0.125 ... 0.5, both signs
  for (BFloat16& v : out) v.bits |= static_cast<uint16_t>((gen() & 1) << 15);
  return out;
}

const char* Same(const std::vector<float>& a, const std::vector<float>& b) {
  return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0 ? "same bits" : "DIFFERENT BITS";
}

struct Shape {
  const char* name;
  int64_t c, hw, out, stride;
};

constexpr Shape kShapes[] = {{"layer1", 64, 28, 64, 1},
                             {"layer2", 128, 14, 128, 1},
                             {"layer3", 256, 7, 256, 1},
                             {"layer4", 512, 4, 512, 1},
                             {"into layer2", 64, 28, 128, 2},
                             {"into layer3", 128, 14, 256, 2},
                             {"into layer4", 256, 7, 512, 2},
                             {"layer3 (32x32)", 256, 8, 256, 1},
                             {"into layer2 (32x32)", 64, 32, 128, 2},
                             {"56x56 stride 2", 64, 56, 128, 2},
                             {"into layer3 (32x32)", 128, 16, 256, 2}};

// The images per group of unfolded bf16 rows the engine uses for g (rows within 2 MB, at least one image):
// the grid forward's chunk order and the weight gradient's groups follow it.
int64_t EngineImagesPerGroup(const ConvGeometry& g) {
  return std::clamp<int64_t>((int64_t{2} << 20) / (g.P() * g.K() * 2), 1, g.n);
}

// w [out, c, 3, 3] as [out, (ky, kx, c)], as the grid kernel takes it.
std::vector<BFloat16> TapsFirst(const std::vector<BFloat16>& w, const ConvGeometry& g) {
  std::vector<BFloat16> taps_first(w.size());
  for (int64_t o = 0; o < g.out; ++o) {
    for (int64_t ch = 0; ch < g.c; ++ch) {
      for (int64_t t = 0; t < 9; ++t) taps_first[(o * 9 + t) * g.c + ch] = w[(o * g.c + ch) * 9 + t];
    }
  }
  return taps_first;
}

void Forward(const Shape& s) {
  const ConvGeometry g = Geometry(s.c, s.hw, s.out, s.stride);
  const std::vector<BFloat16> x = RandomBf16(g.n * g.h * g.w * g.c, 1), w = RandomBf16(g.out * g.K(), 2);
  std::vector<float> rows(g.n * g.P() * g.out), ours(rows.size());
  ddp::cpu::SetForwardAlgorithm(ddp::cpu::ForwardAlgorithm::kRows);
  const double rows_ms = ddp::BestMs(
      g_reps, [&] { ddp::cpu::ConvForwardChannelsLast(x.data(), w.data(), nullptr, g, rows.data()); });
  ddp::cpu::SetForwardAlgorithm(ddp::cpu::ForwardAlgorithm::kAuto);
  const double auto_ms = ddp::BestMs(
      g_reps, [&] { ddp::cpu::ConvForwardChannelsLast(x.data(), w.data(), nullptr, g, ours.data()); });
  std::printf("forward  %-20s engine %6.2f ms (%s as kRows), kRows %6.2f ms", s.name, auto_ms,
              Same(ours, rows), rows_ms);
  if (ddp::cpu::AmxForwardApplies(g)) {
    const double one_row =
        ddp::BestMs(g_reps, [&] { ddp::cpu::AmxForwardChannelsLast(x.data(), w.data(), g, ours.data()); });
    std::printf(", one-row kernel %6.2f ms (%s)", one_row, Same(ours, rows));
  }
  const std::vector<BFloat16> taps_first = TapsFirst(w, g);
  const int64_t group = EngineImagesPerGroup(g);
  int64_t computed = 0;
  const double grid = ddp::BestMs(g_reps, [&] {
    computed = ddp::cpu::AmxGridForwardChannelsLast(x.data(), taps_first.data(), g, group, ours.data());
  });
  std::printf(", grid kernel %6.2f ms (%lld images, %s)", grid, static_cast<long long>(computed),
              computed == g.n ? Same(ours, rows) : "-");
  std::printf("%s\n", ddp::cpu::AmxGridForwardPreferred(g) || !ddp::cpu::AmxForwardApplies(g)
                          ? "  [the engine: grid]"
                          : "  [the engine: one row]");
}

void InputGradient(const Shape& s) {
  const ConvGeometry g = Geometry(s.c, s.hw, s.out, s.stride);
  const std::vector<BFloat16> gy = RandomBf16(g.n * g.P() * g.out, 3), w = RandomBf16(g.out * g.K(), 4);
  std::vector<float> primitive(g.n * g.h * g.w * g.c), ours(primitive.size());
  const double primitive_ms = ddp::BestMs(
      g_reps, [&] { ddp::cpu::OneDnnConvBackwardData(w.data(), gy.data(), g, primitive.data()); });
  const double ours_ms = ddp::BestMs(
      g_reps, [&] { ddp::cpu::AmxInputGradientChannelsLast(w.data(), gy.data(), g, ours.data()); });
  std::printf(
      "input gradient %-14s AMX tiles %6.2f ms, backward-data primitive %6.2f ms (%s)  [the engine: %s]\n",
      s.name, ours_ms, primitive_ms, Same(ours, primitive),
      ddp::cpu::AmxInputGradientApplies(g) ? "AMX tiles" : "primitive");
}

// The weight gradient alone (ConvBackwardChannelsLast with only gw wanted), the engine's choice against
// WeightGradientAlgorithm::kRows (the unfolded rows on oneDNN's matmul), on the shapes whose rows the AMX
// kernel stands in for.
void WeightGradient(const Shape& s) {
  const ConvGeometry g = Geometry(s.c, s.hw, s.out, s.stride);
  const int64_t group = EngineImagesPerGroup(g);
  if (!ddp::cpu::AmxWeightGradientApplies(g, group)) return;
  const std::vector<BFloat16> x = RandomBf16(g.n * g.h * g.w * g.c, 5), w = RandomBf16(g.out * g.K(), 6);
  const std::vector<BFloat16> gy_low = RandomBf16(g.n * g.P() * g.out, 7);
  std::vector<float> gy(gy_low.size()), ours(g.out * g.K()), rows(ours.size());
  for (size_t i = 0; i < gy.size(); ++i) gy[i] = ddp::BFloat16ToFloat(gy_low[i].bits);
  const auto backward = [&](std::vector<float>& gw) {
    ddp::cpu::ConvBackwardChannelsLast(x.data(), w.data(), gy.data(), gy_low.data(), g,
                                       {nullptr, gw.data(), nullptr});
  };
  ddp::cpu::SetWeightGradientAlgorithm(ddp::cpu::WeightGradientAlgorithm::kRows);
  const double rows_ms = ddp::BestMs(g_reps, [&] { backward(rows); });
  ddp::cpu::SetWeightGradientAlgorithm(ddp::cpu::WeightGradientAlgorithm::kAuto);
  const double ours_ms = ddp::BestMs(g_reps, [&] { backward(ours); });
  std::printf("weight gradient %-13s AMX tiles %6.2f ms, rows %6.2f ms (%s, %lld images a group)\n", s.name,
              ours_ms, rows_ms, Same(ours, rows), static_cast<long long>(group));
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  if (argc > 2) g_reps = std::max(1, std::atoi(argv[2]));
  ddp::SetNumThreads(threads);
  if (!ddp::cpu::AmxGridForwardComputes(Geometry(64, 4, 64, 1)) ||
      std::strcmp(ddp::cpu::Bf16Instructions(), "amx") != 0) {
    std::printf("amx_kernel_bench: no AMX here (or oneDNN is kept off it): nothing to compare\n");
    return 0;
  }
  ddp::cpu::SetBf16GemmKernel(ddp::cpu::Bf16GemmKernel::kOneDnn);
  std::printf("threads %d, batch 64, best of %d calls each\n", threads, g_reps);
  for (const Shape& s : kShapes) Forward(s);
  for (const Shape& s : kShapes) InputGradient(s);
  for (const Shape& s : kShapes) WeightGradient(s);
  return 0;
}
