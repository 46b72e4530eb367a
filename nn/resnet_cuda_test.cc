// resnet18 on a GPU against the same model on the CPU: a training step's logits, loss, every parameter
// gradient and every BatchNorm buffer, then eval-mode logits. Every op it runs (strided convolutions
// without bias, 1x1 downsamples, BatchNorm with running statistics, residual adds, global average
// pooling) takes its CUDA path. Skips with a printed reason without a GPU (or without --config=cuda).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/cuda_test.h"
#ifdef DDP_WITH_CUDA
#include "nn/models.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#endif

namespace ddp {
namespace {

#ifndef DDP_WITH_CUDA

DDP_CUDA_TESTS_NEED_A_CUDA_BUILD(ResNetCudaTest)

#else

const Device kGpu = Device::CUDA(0);

using ResNetCudaTest = CudaTest;

// max |gpu - cpu| <= tolerance * max(1, max |cpu|): float32 sums in another order (cuBLAS, the CUDA
// reductions) through 20 BatchNorms differ in the last bits, a wrong kernel by far more.
void ExpectClose(const Tensor& gpu, const Tensor& cpu, const std::string& what, double tolerance = 1e-4) {
  ASSERT_TRUE(gpu.defined() && cpu.defined()) << what;
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  ASSERT_TRUE(gpu.device() == kGpu) << what << " is on " << gpu.device().ToString();
  const std::vector<float> a = ToDType(ToDevice(gpu, Device::CPU()), DType::kFloat32).ToVector<float>();
  const std::vector<float> e = ToDType(cpu, DType::kFloat32).ToVector<float>();
  double scale = 1.0, worst = 0.0;
  for (float v : e) scale = std::max(scale, std::abs(static_cast<double>(v)));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - e[i]));
  EXPECT_LE(worst, tolerance * scale) << what;
}

TEST_F(ResNetCudaTest, TrainingStepAndEvalMatchTheCpu) {
  Generator g1(5), g2(5);
  std::shared_ptr<Module> cpu = MakeModel("resnet18", g1).value();
  std::shared_ptr<Module> gpu = MakeModel("resnet18", g2).value();
  for (const Tensor& t : gpu->Parameters()) cuda::MoveToDeviceInPlace(t, kGpu);
  for (const Tensor& t : gpu->Buffers()) cuda::MoveToDeviceInPlace(t, kGpu);
  Generator data(6);
  const Tensor x = Uniform({6, 1, 28, 28}, 0.0f, 1.0f, data);
  const Tensor y = FromVector(std::vector<int64_t>{1, 4, 9, 0, 3, 3}, {6});

  const Tensor cpu_logits = cpu->Forward(x);
  const Tensor gpu_logits = gpu->Forward(ToDevice(x, kGpu));
  ExpectClose(gpu_logits, cpu_logits, "logits");
  const Tensor cpu_loss = CrossEntropy(cpu_logits, y);
  const Tensor gpu_loss = CrossEntropy(gpu_logits, ToDevice(y, kGpu));
  ExpectClose(gpu_loss, cpu_loss, "loss");
  cpu_loss.Backward();
  gpu_loss.Backward();
  const NamedTensors cp = cpu->NamedParameters(), gp = gpu->NamedParameters();
  ASSERT_EQ(cp.size(), gp.size());
  for (size_t i = 0; i < cp.size(); ++i) ExpectClose(gp[i].second.grad(), cp[i].second.grad(), "grad " + cp[i].first);
  const NamedTensors cb = cpu->NamedBuffers(), gb = gpu->NamedBuffers();
  ASSERT_EQ(cb.size(), gb.size());
  for (size_t i = 0; i < cb.size(); ++i) ExpectClose(gb[i].second, cb[i].second, cb[i].first);

  cpu->Eval();
  gpu->Eval();
  ExpectClose(gpu->Forward(ToDevice(x, kGpu)), cpu->Forward(x), "eval logits");
}

#endif  // DDP_WITH_CUDA

}  // namespace
}  // namespace ddp
