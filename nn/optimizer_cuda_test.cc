// SGD and Adam on CUDA parameters against the same steps on the CPU. Skips with a printed reason where
// there is no GPU (or in builds without --config=cuda).
#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/cuda_test.h"
#ifdef DDP_WITH_CUDA
#include "nn/adam.h"
#include "nn/sgd.h"
#include "tensor/cuda/cuda_ops.h"
#endif

namespace ddp {
namespace {

#ifndef DDP_WITH_CUDA

DDP_CUDA_TESTS_NEED_A_CUDA_BUILD(OptimizerCudaTest)

#else

const Device kGpu = Device::CUDA(0);

using OptimizerCudaTest = CudaTest;

Tensor Rand(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return Uniform(shape, -1.0f, 1.0f, g);
}

// Three steps of the optimizer `make` builds, on a CPU parameter and on a CUDA copy of it.
void ExpectSameSteps(const std::string& what,
                     const std::function<std::unique_ptr<Optimizer>(const Tensor&)>& make) {
  Tensor pc = Rand({37}, 1), gc = Rand({37}, 2);
  Tensor pg = ToDevice(pc, kGpu);
  pc.set_requires_grad(true);
  pg.set_requires_grad(true);
  pc.set_grad(Clone(gc));
  pg.set_grad(ToDevice(gc, kGpu));
  std::unique_ptr<Optimizer> oc = make(pc), og = make(pg);
  for (int step = 0; step < 3; ++step) {
    oc->Step();
    og->Step();
  }
  const std::vector<float> a = pc.ToVector<float>(), b = pg.ToVector<float>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f * (1.0f + std::fabs(a[i]))) << what << " " << i;
}

TEST_F(OptimizerCudaTest, SgdStepsMatchCpu) {
  ExpectSameSteps("SGD", [](const Tensor& p) {
    SgdOptions o;
    o.lr = 0.1f;
    o.momentum = 0.9f;
    o.weight_decay = 1e-4f;
    return std::unique_ptr<Optimizer>(new Sgd({p}, o));
  });
}

TEST_F(OptimizerCudaTest, AdamStepsMatchCpu) {
  ExpectSameSteps("Adam", [](const Tensor& p) { return std::unique_ptr<Optimizer>(new Adam({p}, AdamOptions{})); });
}

#endif  // DDP_WITH_CUDA

}  // namespace
}  // namespace ddp
