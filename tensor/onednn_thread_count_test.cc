// SetNumThreads takes effect on oneDNN's cached plans: oneDNN fixes a primitive's team size when it
// creates it, so the per-thread plan caches of the convolutions (tensor/conv_onednn.cc) and of the bf16
// matmul (tensor/cpu_gemm_bf16.cc) keep one plan per kernel thread count. A plan made under two threads
// and looked up again under one must not go on running two threads, nor one made under one thread keep a
// two-thread request on one.
//
// What runs where is read from CPU time: the process's minus this thread's is what every other thread
// (the OpenMP team's workers) spent. Under one kernel thread the others stay idle; under two they take
// about half the work. The control case (two threads after one) shows that the measure sees a team.
#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tensor/conv_onednn.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"
#include "tensor/threads.h"

namespace ddp {
namespace {

double CpuSeconds(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// CPU seconds that threads other than this one spent while `work` ran here.
double OtherThreadsCpu(const std::function<void()>& work) {
  const double process = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID), self = CpuSeconds(CLOCK_THREAD_CPUTIME_ID);
  work();
  return (CpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - process) - (CpuSeconds(CLOCK_THREAD_CPUTIME_ID) - self);
}

// CPU seconds this thread spends on `work`.
double OwnCpu(const std::function<void()>& work) {
  const double self = CpuSeconds(CLOCK_THREAD_CPUTIME_ID);
  work();
  return CpuSeconds(CLOCK_THREAD_CPUTIME_ID) - self;
}

// Runs `work` once under `first` kernel threads (creating its plans), then under `second` threads
// repeatedly; returns the other threads' CPU time over the repeats as a share of this thread's.
double OtherThreadsShare(int first, int second, const std::function<void()>& work) {
  SetNumThreads(first);
  work();
  SetNumThreads(second);
  work();  // the plans for `second` threads, where they are keyed by the count
  // An idle OpenMP worker may spin for a few milliseconds before it sleeps (libgomp's GOMP_SPINCOUNT, where
  // OMP_WAIT_POLICY is not passive as the BUILD rule sets it): let the first phase's workers settle, so
  // that only work done for `second` threads is counted.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  double others = 0, own = 0;
  for (int i = 0; i < 5; ++i) {
    double round_own = 0;
    others += OtherThreadsCpu([&] { round_own = OwnCpu(work); });
    own += round_own;
  }
  return others / own;
}

// A oneDNN direct convolution (forward, both gradients) of `batch` images, tens of milliseconds. Each
// test takes its own batch size, so its plans are new to it whatever ran before.
void ConvolutionStep(int64_t batch) {
  Generator gen(5);
  Tensor x = Uniform({batch, 64, 28, 28}, -1.0f, 1.0f, gen).set_requires_grad(true);
  Tensor w = Uniform({64, 64, 3, 3}, -0.1f, 0.1f, gen).set_requires_grad(true);
  Sum(Conv2d(x, w, Tensor(), 1, 1)).Backward();
}

// bf16 matmuls of `n` x `n` matrices on oneDNN's kernel (each test its own n, as above).
void Bf16Matmuls(int64_t n) {
  const std::vector<BFloat16> a(n * n, BFloat16{0x3f80}), b(n * n, BFloat16{0x3f00});  // 1.0, 0.5
  std::vector<float> c(n * n);
  for (int i = 0; i < 40; ++i)
    cpu::Gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  ASSERT_EQ(c[0], 0.5f * static_cast<float>(n));
}

class OneDnnThreadCountTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    cpu::SetConvKernel(cpu::ConvKernel::kOneDnn);
    if (std::string(GetParam()) == "bf16_matmul") {
      if (!cpu::OneDnnBf16MatmulAvailable()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU";
      cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn);
    }
  }
  void TearDown() override {
    cpu::SetConvKernel(cpu::ConvKernel::kAuto);
    cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
    SetNumThreads(1);
  }
  // The pass of the parameter, at a size of the test's own (`variant` 0 or 1).
  std::function<void()> Work(int variant) const {
    if (std::string(GetParam()) == "bf16_matmul") return [variant] { Bf16Matmuls(384 + variant); };
    return [variant] { ConvolutionStep(16 + variant); };
  }
};

TEST_P(OneDnnThreadCountTest, OneThreadAfterTwoRunsOnOne) {
  const double share = OtherThreadsShare(2, 1, Work(0));
  EXPECT_LT(share, 0.1) << "other threads spent " << share
                        << " of this thread's CPU time under one kernel thread";
}

TEST_P(OneDnnThreadCountTest, TwoThreadsAfterOneRunOnTwo) {
  const double share = OtherThreadsShare(1, 2, Work(1));
  EXPECT_GT(share, 0.4) << "other threads spent only " << share
                        << " of this thread's CPU time under two kernel threads";
}

INSTANTIATE_TEST_SUITE_P(Plans, OneDnnThreadCountTest, ::testing::Values("convolution", "bf16_matmul"));

}  // namespace
}  // namespace ddp
