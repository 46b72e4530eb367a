// Micro-benchmark of the CNN layers of the MNIST model (batch 64): Conv2d forward and forward+backward
// for conv1 (1->32, 3x3, pad 1, 28x28) and conv2 (32->64, 3x3, pad 1, 14x14), MaxPool2d, and a whole
// training step of the small CNN, with each conv -> ReLU -> pool block as three ops and as one
// (Conv2dReluMaxPool2d, as nn::Sequential runs it), then ResNet-18's convolutions (with GFLOP/s) and
// its element-wise layers at layer1's size and its BatchNorm + ReLU at every stage's size ("resnet" in the
// label). Prints milliseconds per iteration: the median and the minimum of 20 runs (the minimum is the
// steadier number on a shared machine).
//   bazel run //tensor:conv_bench -- [threads] [label substring] [ResNet variant substrings, comma-separated]
//                                    [ResNet batch]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tensor/autocast.h"
#include "tensor/autograd.h"
#include "tensor/batch_norm.h"
#include "tensor/conv_forward_by_pixel_class.h"
#include "tensor/conv_onednn.h"
#include "tensor/conv_weight_gradient_by_tap.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

namespace ddp {
namespace {

const char* g_filter = "";          // run only the cases whose label contains this (argv[2])
// And of RunResNet's variants those whose name contains one of these comma-separated substrings (argv[3]).
const char* g_variant_filter = "";
int64_t g_resnet_batch = 64;  // RunResNet's batch (argv[4])

void Report(const char* label, const std::function<void()>& fn);

// Whether RunResNet runs the variant called `name` (g_variant_filter).
bool VariantWanted(const char* name) {
  const std::string filter = g_variant_filter;
  size_t start = 0;
  for (;;) {
    const size_t comma = filter.find(',', start);
    const std::string part =
        filter.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (std::strstr(name, part.c_str()) != nullptr) return true;
    if (comma == std::string::npos) return false;
    start = comma + 1;
  }
}

struct Timing {
  double median_ms, min_ms;
};

Timing Measure(const std::function<void()>& fn, int iters = 20) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times[0]};
}

void Report(const char* label, const std::function<void()>& fn) {
  if (std::strstr(label, g_filter) == nullptr) return;
  const Timing t = Measure(fn);
  std::printf("%-30s %8.3f ms (min %8.3f ms)\n", label, t.median_ms, t.min_ms);
}

Tensor Param(const Shape& shape, Generator& gen) {
  Tensor t = Uniform(shape, -0.1f, 0.1f, gen);
  t.set_requires_grad(true);
  return t;
}

void Run() {
  Generator gen(0);
  Tensor x1 = Uniform({64, 1, 28, 28}, 0.0f, 1.0f, gen);
  Tensor w1 = Param({32, 1, 3, 3}, gen), b1 = Param({32}, gen);
  Tensor x2 = Param({64, 32, 14, 14}, gen);
  Tensor w2 = Param({64, 32, 3, 3}, gen), b2 = Param({64}, gen);
  Tensor f1 = Param({128, 3136}, gen), fb1 = Param({128}, gen);
  Tensor f2 = Param({10, 128}, gen), fb2 = Param({10}, gen);
  std::vector<int64_t> labels(64);
  for (int64_t i = 0; i < 64; ++i) labels[i] = i % 10;
  Tensor target = FromVector(labels, {64});

  auto fwd = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    NoGradGuard no_grad;
    Conv2d(x, w, b, 1, 1);
  };
  auto fwd_bwd = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor y = Conv2d(x, w, b, 1, 1);
    y.Backward(OnesLike(y));
  };
  Report("conv1 fwd", ([&] { fwd(x1, w1, b1); }));
  Report("conv1 fwd+bwd (no grad x)", ([&] { fwd_bwd(x1, w1, b1); }));
  Report("conv2 fwd", ([&] { fwd(x2, w2, b2); }));
  Report("conv2 fwd+bwd", ([&] { fwd_bwd(x2, w2, b2); }));
  Tensor mp = Param({64, 32, 28, 28}, gen);
  Report("maxpool 64x32x28x28 fwd", ([&] {
           NoGradGuard no_grad;
           MaxPool2d(mp, 2);
         }));
  Report("maxpool 64x32x28x28 fwd+bwd", ([&] {
           Tensor y = MaxPool2d(mp, 2);
           y.Backward(OnesLike(y));
         }));
  Report("maxpool of relu 64x32x28x28 fwd+bwd", ([&] {
           Tensor y = MaxPool2dOfRelu(mp, 2);
           y.Backward(OnesLike(y));
         }));
  Report("conv1+relu+pool fwd+bwd", ([&] {
           Tensor y = Conv2dReluMaxPool2d(x1, w1, b1, 1, 1, 2);
           y.Backward(OnesLike(y));
         }));
  Report("conv2+relu+pool fwd+bwd", ([&] {
           Tensor y = Conv2dReluMaxPool2d(x2, w2, b2, 1, 1, 2);
           y.Backward(OnesLike(y));
         }));
  Report("whole CNN step", ([&] {
           Tensor h = MaxPool2d(Relu(Conv2d(x1, w1, b1, 1, 1)), 2);
           h = MaxPool2d(Relu(Conv2d(h, w2, b2, 1, 1)), 2);
           h = Relu(Linear(Flatten(h), f1, fb1));
           CrossEntropy(Linear(h, f2, fb2), target).Backward();
         }));
  Report("whole CNN step, fused blocks", ([&] {
           Tensor h = Conv2dReluMaxPool2d(x1, w1, b1, 1, 1, 2);
           h = Conv2dReluMaxPool2d(h, w2, b2, 1, 1, 2);
           h = Relu(Linear(Flatten(h), f1, fb1));
           CrossEntropy(Linear(h, f2, fb2), target).Backward();
         }));
}

// The convolutions of ResNet-18 on 28x28 images (nn/resnet.h) and on CIFAR's 32x32 ("c32" labels) at batch 64
// (or g_resnet_batch), forward and forward + backward
// (input, weight), with each CPU kernel (Note [Conv2d kernel choice]) in float32 and under bf16 autocast,
// the kernels interleaved round by round so that load on a shared machine hits them alike. Prints the
// minimum over the rounds, the GFLOP/s of forward + backward (2 * MACs forward, twice that backward), and
// a total weighted by how often ResNet-18 runs each shape (`uses`). The backward passes apart: a third
// run per round without the input gradient gives forward + backward-weights; backward-data is the rest.
void RunResNet() {
  struct Case {
    const char* label;
    int64_t c, out, hw, kernel, stride, uses;
    int input_size;  // the image side the shape belongs to: 28 (Fashion-MNIST) or 32 (CIFAR, "c32" labels)
  };
  const Case cases[] = {
      {"resnet conv1 1->64 3x3 28", 1, 64, 28, 3, 1, 1, 28},
      {"resnet l1 64->64 3x3 28", 64, 64, 28, 3, 1, 4, 28},
      {"resnet l2a 64->128 3x3 s2", 64, 128, 28, 3, 2, 1, 28},
      {"resnet l2 128->128 3x3 14", 128, 128, 14, 3, 1, 3, 28},
      {"resnet l2ds 64->128 1x1 s2", 64, 128, 28, 1, 2, 1, 28},
      {"resnet l3a 128->256 3x3 s2", 128, 256, 14, 3, 2, 1, 28},
      {"resnet l3 256->256 3x3 7", 256, 256, 7, 3, 1, 3, 28},
      {"resnet l3ds 128->256 1x1 s2", 128, 256, 14, 1, 2, 1, 28},
      {"resnet l4a 256->512 3x3 s2", 256, 512, 7, 3, 2, 1, 28},
      {"resnet l4 512->512 3x3 4", 512, 512, 4, 3, 1, 3, 28},
      {"resnet l4ds 256->512 1x1 s2", 256, 512, 7, 1, 2, 1, 28},
      // The same network on CIFAR's 3x32x32 images (--dataset=cifar10).
      {"c32 resnet conv1 3->64 3x3 32", 3, 64, 32, 3, 1, 1, 32},
      {"c32 resnet l1 64->64 3x3 32", 64, 64, 32, 3, 1, 4, 32},
      {"c32 resnet l2a 64->128 3x3 s2", 64, 128, 32, 3, 2, 1, 32},
      {"c32 resnet l2 128->128 3x3 16", 128, 128, 16, 3, 1, 3, 32},
      {"c32 resnet l2ds 64->128 1x1 s2", 64, 128, 32, 1, 2, 1, 32},
      {"c32 resnet l3a 128->256 3x3 s2", 128, 256, 16, 3, 2, 1, 32},
      {"c32 resnet l3 256->256 3x3 8", 256, 256, 8, 3, 1, 3, 32},
      {"c32 resnet l3ds 128->256 1x1 s2", 128, 256, 16, 1, 2, 1, 32},
      {"c32 resnet l4a 256->512 3x3 s2", 256, 512, 8, 3, 2, 1, 32},
      {"c32 resnet l4 512->512 3x3 4", 512, 512, 4, 3, 1, 3, 32},
      {"c32 resnet l4ds 256->512 1x1 s2", 256, 512, 8, 1, 2, 1, 32},
  };
  struct Variant {
    const char* name;
    cpu::ConvKernel kernel;
    bool bf16;
    // kOneDnn: bf16 convolutions run oneDNN's bf16 primitives; kAuto: this CPU's default
    // (tensor/conv_kernels.cc).
    cpu::Bf16GemmKernel bf16_gemm = cpu::Bf16GemmKernel::kAuto;
    bool channels_last = false;  // x, y and the gradients NHWC (Note [Channels-last activations])
    // Where channels-last weight gradients unfold rows: the rule, or forced (Note [Weight gradients tap by
    // tap]).
    cpu::WeightGradientAlgorithm weight_gradient = cpu::WeightGradientAlgorithm::kAuto;
    // Where the channels-last forward unfolds rows: the rule, or forced (Note [Forward by pixel class]).
    cpu::ForwardAlgorithm forward = cpu::ForwardAlgorithm::kAuto;
    // Whether bf16 3x3 stride-1 convolutions run float32 Winograd on their widened operands: the rule, or
    // forced (Note [bf16 convolutions on float32 Winograd]).
    cpu::Bf16Winograd winograd = cpu::Bf16Winograd::kAuto;
  };
  // "auto" is the default rule (Note [Conv2d kernel choice]); "onednn" forces oneDNN's direct primitives
  // for every shape, "winograd" the Winograd algorithm wherever it runs (Note [Winograd convolutions]),
  // "wavx2" the engine's own Winograd (tensor/conv_winograd.h) wherever it fits.
  const Variant variants[] = {
      {"im2col fp32", cpu::ConvKernel::kIm2Col, false},
      {"auto   fp32", cpu::ConvKernel::kAuto, false},
      {"onednn fp32", cpu::ConvKernel::kOneDnn, false},
      {"winogr fp32", cpu::ConvKernel::kWinograd, false},
      {"im2col bf16", cpu::ConvKernel::kIm2Col, true},
      {"auto   bf16", cpu::ConvKernel::kAuto, true},
      {"bf16 primitives", cpu::ConvKernel::kOneDnn, true, cpu::Bf16GemmKernel::kOneDnn},
      {"auto   fp32 NHWC", cpu::ConvKernel::kAuto, false, cpu::Bf16GemmKernel::kAuto, true},
      {"auto   bf16 NHWC", cpu::ConvKernel::kAuto, true, cpu::Bf16GemmKernel::kAuto, true},
      {"bf16 NHWC gw rows", cpu::ConvKernel::kAuto, true, cpu::Bf16GemmKernel::kAuto, true,
       cpu::WeightGradientAlgorithm::kRows},
      {"bf16 NHWC gw taps", cpu::ConvKernel::kAuto, true, cpu::Bf16GemmKernel::kAuto, true,
       cpu::WeightGradientAlgorithm::kTaps},
      {"bf16 NHWC fwd rows", cpu::ConvKernel::kAuto, true, cpu::Bf16GemmKernel::kAuto, true,
       cpu::WeightGradientAlgorithm::kAuto, cpu::ForwardAlgorithm::kRows},
      {"bf16 NHWC fwd classes", cpu::ConvKernel::kAuto, true, cpu::Bf16GemmKernel::kAuto, true,
       cpu::WeightGradientAlgorithm::kAuto, cpu::ForwardAlgorithm::kClasses},
      {"bf16 NHWC fp32 wino", cpu::ConvKernel::kAuto, true, cpu::Bf16GemmKernel::kAuto, true,
       cpu::WeightGradientAlgorithm::kAuto, cpu::ForwardAlgorithm::kAuto, cpu::Bf16Winograd::kAlways},
      {"bf16 NHWC bf16 kernels", cpu::ConvKernel::kAuto, true, cpu::Bf16GemmKernel::kAuto, true,
       cpu::WeightGradientAlgorithm::kAuto, cpu::ForwardAlgorithm::kAuto, cpu::Bf16Winograd::kNever},
      {"wavx2  fp32", cpu::ConvKernel::kWinogradAvx2, false},
      {"wavx2  fp32 NHWC", cpu::ConvKernel::kWinogradAvx2, false, cpu::Bf16GemmKernel::kAuto, true}};
  constexpr int kVariants = 17, kRounds = 5;
  // Per input size (index 0: 28, 1: 32), so that the totals never mix the two networks.
  double total_fwd[2][kVariants] = {}, total_all[2][kVariants] = {};
  bool measured[2] = {false, false};
  Generator gen(1);
  for (const Case& k : cases) {
    if (std::strstr(k.label, g_filter) == nullptr) continue;
    const int set = k.input_size == 28 ? 0 : 1;
    measured[set] = true;
    const int64_t n = g_resnet_batch;
    Tensor x = Param({n, k.c, k.hw, k.hw}, gen);
    Tensor w = Param({k.out, k.c, k.kernel, k.kernel}, gen);
    const int64_t padding = k.kernel / 2, o = (k.hw + 2 * padding - k.kernel) / k.stride + 1;
    const double macs = static_cast<double>(n) * k.out * k.c * k.kernel * k.kernel * o * o;
    const Tensor x_const = x.Detach();  // no input gradient: backward runs the weight pass alone
    const Tensor x_nhwc_const = ContiguousChannelsLast(x.Detach());
    const Tensor x_nhwc = Tensor::View(x_nhwc_const.storage(), x_nhwc_const.shape(), x_nhwc_const.strides(),
                                       0, DType::kFloat32);
    x_nhwc.set_requires_grad(true);
    const Tensor gy = Ones({n, k.out, o, o}), gy_nhwc = ContiguousChannelsLast(gy);
    auto forward = [&](bool bf16, const Tensor& input) {
      AutocastScope autocast(bf16);
      return Conv2d(input, w, Tensor(), k.stride, padding);
    };
    std::vector<double> fwd[kVariants], all[kVariants], weights_only[kVariants];
    for (int round = -1; round < kRounds; ++round) {  // round -1 warms up (primitive creation, scratch)
      for (int v = 0; v < kVariants; ++v) {
        if (!VariantWanted(variants[v].name)) continue;
        cpu::SetConvKernel(variants[v].kernel);
        cpu::SetBf16Winograd(variants[v].winograd);
        cpu::SetBf16GemmKernel(variants[v].bf16_gemm);
        cpu::SetWeightGradientAlgorithm(variants[v].weight_gradient);
        cpu::SetForwardAlgorithm(variants[v].forward);
        const bool nhwc = variants[v].channels_last;
        const Tensor& input = nhwc ? x_nhwc : x;
        const Tensor& grad = nhwc ? gy_nhwc : gy;
        auto start = std::chrono::steady_clock::now();
        { Tensor y = forward(variants[v].bf16, input); }
        auto mid = std::chrono::steady_clock::now();
        {
          Tensor y = forward(variants[v].bf16, input);
          y.Backward(grad);
        }
        auto end = std::chrono::steady_clock::now();
        {
          Tensor y = forward(variants[v].bf16, nhwc ? x_nhwc_const : x_const);
          y.Backward(grad);
        }
        auto last = std::chrono::steady_clock::now();
        if (round < 0) continue;
        fwd[v].push_back(std::chrono::duration<double, std::milli>(mid - start).count());
        all[v].push_back(std::chrono::duration<double, std::milli>(end - mid).count());
        weights_only[v].push_back(std::chrono::duration<double, std::milli>(last - end).count());
      }
    }
    for (int v = 0; v < kVariants; ++v) {
      if (fwd[v].empty()) continue;  // filtered out
      const double f = *std::min_element(fwd[v].begin(), fwd[v].end());
      const double a = *std::min_element(all[v].begin(), all[v].end());
      const double wo = *std::min_element(weights_only[v].begin(), weights_only[v].end());
      total_fwd[set][v] += k.uses * f;
      total_all[set][v] += k.uses * a;
      std::printf(
          "%-28s %s fwd %8.3f ms, fwd+bwd %8.3f ms %6.1f GFLOP/s; bwd-weights %8.3f, bwd-data %8.3f ms\n",
          k.label, variants[v].name, f, a, 6.0 * macs / (a * 1e6), wo - f, a - wo);
    }
  }
  for (int set = 0; set < 2; ++set) {
    if (!measured[set]) continue;
    for (int v = 0; v < kVariants; ++v) {
      if (!VariantWanted(variants[v].name)) continue;
      std::printf("resnet18 (%dx%d) convs per step (x uses) %s fwd %8.1f ms, fwd+bwd %8.1f ms\n", set == 0 ? 28 : 32,
                  set == 0 ? 28 : 32, variants[v].name, total_fwd[set][v], total_all[set][v]);
    }
  }
  cpu::SetConvKernel(cpu::ConvKernel::kAuto);
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
  cpu::SetWeightGradientAlgorithm(cpu::WeightGradientAlgorithm::kAuto);
  cpu::SetForwardAlgorithm(cpu::ForwardAlgorithm::kAuto);
  cpu::SetBf16Winograd(cpu::Bf16Winograd::kAuto);
}

// BatchNorm + ReLU (fused, as BasicBlock runs it) forward + backward at each ResNet-18 stage's
// activation shape (batch 64): the per-channel sums stride across the batch, so the stages with small
// images (rows of 49 and 16 floats) stress memory latency rather than bandwidth.
void RunResNetStageBatchNorms() {
  struct Stage {
    const char* label;
    int64_t channels, side;
  };
  const Stage stages[] = {{"resnet bn+relu l1 64x64x28x28", 64, 28},
                          {"resnet bn+relu l2 64x128x14x14", 128, 14},
                          {"resnet bn+relu l3 64x256x7x7", 256, 7},
                          {"resnet bn+relu l4 64x512x4x4", 512, 4}};
  Generator gen(3);
  for (const Stage& stage : stages) {
    if (std::strstr(stage.label, g_filter) == nullptr) continue;
    Tensor x = Param({64, stage.channels, stage.side, stage.side}, gen);
    Tensor weight = Param({stage.channels}, gen), bias = Param({stage.channels}, gen);
    Tensor mean = Zeros({stage.channels}), var = Ones({stage.channels});
    Tensor gy = OnesLike(x);
    Report(stage.label, ([&] {
             Tensor y = BatchNormAddRelu(x, Tensor(), weight, bias, mean, var, true, 0.1f, 1e-5f);
             y.Backward(gy);
           }));
    // The same activation channels-last, as its [N*H*W, C] view (Note [BatchNorm over channels in lanes]).
    const std::string rows_label = std::string(stage.label) + " rows";
    Tensor rows = Param({64 * stage.side * stage.side, stage.channels}, gen);
    Tensor rows_gy = OnesLike(rows);
    Report(rows_label.c_str(), ([&] {
             Tensor y = BatchNormAddRelu(rows, Tensor(), weight, bias, mean, var, true, 0.1f, 1e-5f);
             y.Backward(rows_gy);
           }));
  }
}

// The element-wise layers of a ResNet-18 BasicBlock at layer1's size ([64, 64, 28, 28], batch 64),
// forward + backward.
void RunResNetElementwise() {
  Generator gen(2);
  Tensor x = Param({64, 64, 28, 28}, gen), r = Param({64, 64, 28, 28}, gen);
  Tensor weight = Param({64}, gen), bias = Param({64}, gen);
  Tensor mean = Zeros({64}), var = Ones({64});
  Report("resnet bn 64x64x28x28 fwd+bwd", ([&] {
           Tensor y = BatchNorm(x, weight, bias, mean, var, true);
           y.Backward(OnesLike(y));
         }));
  Report("resnet relu 64x64x28x28 fwd+bwd", ([&] {
           Tensor y = Relu(x);
           y.Backward(OnesLike(y));
         }));
  Report("resnet add 64x64x28x28 fwd+bwd", ([&] {
           Tensor y = Add(x, r);
           y.Backward(OnesLike(y));
         }));
  Report("resnet ones 64x64x28x28", ([&] { OnesLike(x); }));
  // A block's end as BasicBlock runs it: three ops, and BatchNormAddRelu (tensor/batch_norm.h).
  Report("resnet bn+add+relu 3 ops fwd+bwd", ([&] {
           Tensor y = Relu(Add(BatchNorm(x, weight, bias, mean, var, true), r));
           y.Backward(OnesLike(y));
         }));
  Report("resnet bn+add+relu fused fwd+bwd", ([&] {
           Tensor y = BatchNormAddRelu(x, r, weight, bias, mean, var, true, 0.1f, 1e-5f);
           y.Backward(OnesLike(y));
         }));
  Report("resnet bn+relu 2 ops fwd+bwd", ([&] {
           Tensor y = Relu(BatchNorm(x, weight, bias, mean, var, true));
           y.Backward(OnesLike(y));
         }));
  Report("resnet bn+relu fused fwd+bwd", ([&] {
           Tensor y = BatchNormAddRelu(x, Tensor(), weight, bias, mean, var, true, 0.1f, 1e-5f);
           y.Backward(OnesLike(y));
         }));
  RunResNetStageBatchNorms();
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  if (argc > 2) ddp::g_filter = argv[2];
  if (argc > 3) ddp::g_variant_filter = argv[3];
  if (argc > 4) ddp::g_resnet_batch = std::max(1, std::atoi(argv[4]));
  ddp::SetNumThreads(threads);
  std::printf("threads: %d\n", threads);
  ddp::Run();
  ddp::RunResNet();
  ddp::RunResNetElementwise();
  return 0;
}
