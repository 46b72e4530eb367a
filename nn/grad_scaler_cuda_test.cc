// GradScaler::UnscaleGradients on CUDA gradients against the same call on CPU copies: the same found_inf
// (inf and NaN in any parameter, or none) and bit-identical unscaled gradients. Skips with a printed
// reason where there is no GPU (or in builds without --config=cuda).
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "nn/grad_scaler.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"
#include "testing/cuda_test.h"

namespace ddp {
namespace {

#ifndef DDP_WITH_CUDA

DDP_CUDA_TESTS_NEED_A_CUDA_BUILD(GradScalerCudaTest)

#else

const Device kGpu = Device::CUDA(0);

using GradScalerCudaTest = CudaTest;

// Two parameters with gradients on `device`; the second gradient's element 5 is set to `poison`.
std::vector<Tensor> ParamsWithGrads(Device device, float poison, bool poisoned) {
  Generator g(3);
  std::vector<Tensor> params;
  for (int64_t size : {17, 300}) {
    Tensor p = Zeros({size}, DType::kFloat32, device);
    p.set_requires_grad(true);
    std::vector<float> grad = Uniform({size}, -1000.0f, 1000.0f, g).ToVector<float>();
    if (poisoned && size == 300) grad[5] = poison;
    p.set_grad(ToDevice(FromVector(grad, {size}), device));
    params.push_back(p);
  }
  return params;
}

void ExpectSameUnscale(float poison, bool poisoned) {
  GradScalerOptions options;
  options.init_scale = 3.0f;  // 1/3 is inexact: the float32 product must round the same on both devices
  const GradScaler scaler(options);
  const std::vector<Tensor> cpu = ParamsWithGrads(Device::CPU(), poison, poisoned);
  const std::vector<Tensor> gpu = ParamsWithGrads(kGpu, poison, poisoned);
  const bool cpu_found = scaler.UnscaleGradients(cpu);
  const bool gpu_found = scaler.UnscaleGradients(gpu);
  EXPECT_EQ(cpu_found, poisoned);
  EXPECT_EQ(gpu_found, cpu_found);
  for (size_t i = 0; i < cpu.size(); ++i) {
    const std::vector<float> a = cpu[i].grad().ToVector<float>();
    const std::vector<float> b = ToDevice(gpu[i].grad(), Device::CPU()).ToVector<float>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t j = 0; j < a.size(); ++j) {
      if (std::isnan(a[j])) {
        EXPECT_TRUE(std::isnan(b[j])) << "param " << i << " element " << j;
      } else {
        EXPECT_EQ(std::memcmp(&a[j], &b[j], sizeof(float)), 0) << "param " << i << " element " << j;
      }
    }
  }
}

TEST_F(GradScalerCudaTest, FiniteGradientsAreUnscaledAsOnTheCpu) { ExpectSameUnscale(0.0f, false); }

TEST_F(GradScalerCudaTest, InfIsFound) { ExpectSameUnscale(std::numeric_limits<float>::infinity(), true); }

TEST_F(GradScalerCudaTest, NegativeInfIsFound) { ExpectSameUnscale(-std::numeric_limits<float>::infinity(), true); }

TEST_F(GradScalerCudaTest, NanIsFound) { ExpectSameUnscale(std::numeric_limits<float>::quiet_NaN(), true); }

#endif  // DDP_WITH_CUDA

}  // namespace
}  // namespace ddp
