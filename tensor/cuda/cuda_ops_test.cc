// Every CUDA op against the CPU path: forward values and input gradients within tolerance. Skips with a
// printed reason where there is no GPU (or in builds without --config=cuda).
#include <cstdio>
#include <functional>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/cuda_test.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/allocator.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_ops.h"
#endif

namespace ddp {
namespace {

#ifndef DDP_WITH_CUDA

DDP_CUDA_TESTS_NEED_A_CUDA_BUILD(CudaOpsTest)

#else

const Device kGpu = Device::CUDA(0);

using CudaOpsTest = CudaTest;

void ExpectClose(const Tensor& cpu, const Tensor& gpu, float tol, const std::string& what) {
  ASSERT_TRUE(cpu.defined() && gpu.defined()) << what;
  ASSERT_EQ(cpu.shape(), gpu.shape()) << what;
  ASSERT_TRUE(gpu.device().is_cuda()) << what;
  const std::vector<float> a = ToDType(cpu, DType::kFloat32).ToVector<float>();
  const std::vector<float> b = ToDType(gpu, DType::kFloat32).ToVector<float>();
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], tol * (1.0f + std::fabs(a[i]))) << what << " element " << i;
  }
}

// Runs `f` on CPU inputs and on CUDA copies of them, compares outputs and the gradients of
// sum(out * seed) with respect to every input.
void CheckOp(const std::string& name, const std::vector<Tensor>& cpu_inputs,
             const std::function<Tensor(const std::vector<Tensor>&)>& f, float tol = 1e-4f) {
  std::vector<Tensor> cpu_in, gpu_in;
  for (const Tensor& t : cpu_inputs) {
    Tensor c = Clone(t);
    Tensor g = ToDevice(t, kGpu);
    if (t.dtype() == DType::kFloat32) {
      c.set_requires_grad(true);
      g.set_requires_grad(true);
    }
    cpu_in.push_back(c);
    gpu_in.push_back(g);
  }
  Tensor out_cpu = f(cpu_in), out_gpu = f(gpu_in);
  ExpectClose(out_cpu, out_gpu, tol, name + " forward");
  if (out_cpu.dtype() != DType::kFloat32 || !out_cpu.requires_grad()) return;
  Generator gen(7);
  Tensor seed = Uniform(out_cpu.shape(), -1.0f, 1.0f, gen);
  Sum(Mul(out_cpu, seed)).Backward();
  Sum(Mul(out_gpu, ToDevice(seed, kGpu))).Backward();
  for (size_t i = 0; i < cpu_in.size(); ++i) {
    if (!cpu_in[i].requires_grad()) continue;
    ExpectClose(cpu_in[i].grad(), gpu_in[i].grad(), tol * 10, name + " grad of input " + std::to_string(i));
  }
}

Tensor Rand(const Shape& shape, uint64_t seed, float low = -1.0f, float high = 1.0f) {
  Generator g(seed);
  return Uniform(shape, low, high, g);
}

TEST_F(CudaOpsTest, CopiesRoundTrip) {
  Tensor x = Rand({3, 5}, 1);
  Tensor g = ToDevice(x, kGpu);
  EXPECT_TRUE(g.device().is_cuda());
  ExpectClose(x, g, 0.0f, "H2D/D2H");
  ExpectClose(Transpose(x, 0, 1), Contiguous(Transpose(g, 0, 1)), 0.0f, "strided D2D");
  ExpectClose(ToDType(x, DType::kBFloat16), ToDType(g, DType::kBFloat16), 0.0f, "bf16 conversion");
  ExpectClose(ToDType(x, DType::kFloat16), ToDType(g, DType::kFloat16), 0.0f, "fp16 conversion");
  Tensor strided_dst = Transpose(Zeros({5, 3}, DType::kFloat32, kGpu), 0, 1);
  CopyInPlace(strided_dst, x);
  ExpectClose(x, strided_dst, 0.0f, "copy into strided CUDA tensor");
  Tensor ints = FromVector(std::vector<int64_t>{3, -1, 7}, {3}, kGpu);
  EXPECT_EQ(ints.ToVector<int64_t>(), (std::vector<int64_t>{3, -1, 7}));
  EXPECT_FLOAT_EQ(static_cast<float>(Full({}, 2.5f, DType::kFloat32, kGpu).item()), 2.5f);
}

TEST_F(CudaOpsTest, ElementWiseWithBroadcasting) {
  CheckOp("Add", {Rand({4, 3}, 1), Rand({3}, 2)}, [](auto& v) { return Add(v[0], v[1]); });
  CheckOp("Sub", {Rand({4, 1}, 1), Rand({1, 3}, 2)}, [](auto& v) { return Sub(v[0], v[1]); });
  CheckOp("Mul", {Rand({2, 3, 4}, 1), Rand({3, 1}, 2)}, [](auto& v) { return Mul(v[0], v[1]); });
  CheckOp("Div", {Rand({4, 3}, 1), Rand({4, 3}, 2, 0.5f, 2.0f)}, [](auto& v) { return Div(v[0], v[1]); });
  CheckOp("MulScalarTensor", {Rand({5, 7}, 1), Rand({}, 2)}, [](auto& v) { return Mul(v[0], v[1]); });
  CheckOp("AddScalar", {Rand({5}, 1)}, [](auto& v) { return AddScalar(v[0], 1.5f); });
  CheckOp("MulScalar", {Rand({5}, 1)}, [](auto& v) { return MulScalar(v[0], -2.0f); });
  CheckOp("Neg", {Rand({5}, 1)}, [](auto& v) { return Neg(v[0]); });
  CheckOp("Relu", {Rand({6, 9}, 1)}, [](auto& v) { return Relu(v[0]); });
  CheckOp("Exp", {Rand({5}, 1)}, [](auto& v) { return Exp(v[0]); });
  CheckOp("Log", {Rand({5}, 1, 0.5f, 2.0f)}, [](auto& v) { return Log(v[0]); });
  CheckOp("Sqrt", {Rand({5}, 1, 0.5f, 2.0f)}, [](auto& v) { return Sqrt(v[0]); });
  CheckOp("Transposed", {Rand({4, 3}, 1)}, [](auto& v) { return Relu(Transpose(v[0], 0, 1)); });
  CheckOp("LargeContiguous", {Rand({1 << 16}, 1), Rand({1 << 16}, 2)}, [](auto& v) { return Mul(v[0], v[1]); });
}

TEST_F(CudaOpsTest, InPlaceOps) {
  Tensor c = Rand({4, 3}, 1), g = ToDevice(c, kGpu);
  Tensor s = Rand({3}, 2);
  AddInPlace(c, s, 0.5f);
  AddInPlace(g, ToDevice(s, kGpu), 0.5f);
  ExpectClose(c, g, 1e-6f, "AddInPlace");
  MulScalarInPlace(c, 3.0f);
  MulScalarInPlace(g, 3.0f);
  ExpectClose(c, g, 1e-6f, "MulScalarInPlace");
  CopyScaledInPlace(c, s, 0.25f);
  CopyScaledInPlace(g, ToDevice(s, kGpu), 0.25f);
  ExpectClose(c, g, 1e-6f, "CopyScaledInPlace");
  FillInPlace(c, 1.25f);
  FillInPlace(g, 1.25f);
  ExpectClose(c, g, 0.0f, "FillInPlace");
}

TEST_F(CudaOpsTest, Reductions) {
  CheckOp("SumAll", {Rand({33, 17}, 1)}, [](auto& v) { return Sum(v[0]); });
  CheckOp("SumDim0", {Rand({300, 5}, 1)}, [](auto& v) { return Sum(v[0], {0}); });
  CheckOp("SumDims", {Rand({2, 3, 4, 5}, 1)}, [](auto& v) { return Sum(v[0], {0, 2, 3}, true); });
  CheckOp("Mean", {Rand({7, 9}, 1)}, [](auto& v) { return Mean(v[0], {1}); });
  CheckOp("GlobalAveragePool", {Rand({3, 5, 4, 6}, 1)}, [](auto& v) { return Mean(v[0], {2, 3}, true); });
  CheckOp("Argmax", {Rand({6, 10}, 1)}, [](auto& v) { return ToDType(Argmax(v[0], 1), DType::kFloat32); });
}

TEST_F(CudaOpsTest, MatmulAndLinear) {
  CheckOp("Matmul", {Rand({17, 33}, 1), Rand({33, 9}, 2)}, [](auto& v) { return Matmul(v[0], v[1]); });
  CheckOp("MatmulTransposed", {Rand({33, 17}, 1), Rand({9, 33}, 2)},
          [](auto& v) { return Matmul(Transpose(v[0], 0, 1), Transpose(v[1], 0, 1)); });
  CheckOp("Linear", {Rand({64, 784}, 1), Rand({512, 784}, 2, -0.05f, 0.05f), Rand({512}, 3)},
          [](auto& v) { return Linear(v[0], v[1], v[2]); });
}

TEST_F(CudaOpsTest, ConvPoolBatchNorm) {
  for (int64_t stride : {1, 2}) {
    for (int64_t padding : {0, 1}) {
      CheckOp("Conv2d s" + std::to_string(stride) + " p" + std::to_string(padding),
              {Rand({3, 4, 9, 8}, 1), Rand({6, 4, 3, 3}, 2), Rand({6}, 3)},
              [=](auto& v) { return Conv2d(v[0], v[1], v[2], stride, padding); });
    }
  }
  // ResNet's: a 1x1 stride-2 downsample and a strided 3x3, both without bias.
  CheckOp("Conv2d 1x1 s2 no bias", {Rand({3, 4, 7, 7}, 1), Rand({6, 4, 1, 1}, 2)},
          [](auto& v) { return Conv2d(v[0], v[1], Tensor(), 2, 0); });
  CheckOp("Conv2d 3x3 s2 p1 no bias", {Rand({3, 4, 7, 7}, 1), Rand({6, 4, 3, 3}, 2)},
          [](auto& v) { return Conv2d(v[0], v[1], Tensor(), 2, 1); });
  CheckOp("MaxPool2d", {Rand({2, 3, 8, 8}, 1)}, [](auto& v) { return MaxPool2d(v[0], 2); });
  CheckOp("MaxPool2dOverlap", {Rand({2, 3, 9, 9}, 1)}, [](auto& v) { return MaxPool2d(v[0], 3, 2); });
  Tensor rm_cpu = Zeros({3}), rv_cpu = Ones({3});
  Tensor rm_gpu = Zeros({3}, DType::kFloat32, kGpu), rv_gpu = Ones({3}, DType::kFloat32, kGpu);
  CheckOp("BatchNormTrain", {Rand({4, 3, 5, 5}, 1), Rand({3}, 2), Rand({3}, 3)}, [&](auto& v) {
    const bool gpu = v[0].device().is_cuda();
    return BatchNorm(v[0], v[1], v[2], gpu ? rm_gpu : rm_cpu, gpu ? rv_gpu : rv_cpu, true);
  });
  ExpectClose(rm_cpu, rm_gpu, 1e-5f, "running_mean");
  ExpectClose(rv_cpu, rv_gpu, 1e-5f, "running_var");
  CheckOp("BatchNormEval", {Rand({4, 3, 5, 5}, 1), Rand({3}, 2), Rand({3}, 3)}, [&](auto& v) {
    const bool gpu = v[0].device().is_cuda();
    return BatchNorm(v[0], v[1], v[2], gpu ? rm_gpu : rm_cpu, gpu ? rv_gpu : rv_cpu, false);
  });
}

TEST_F(CudaOpsTest, LossesAndSoftmax) {
  Tensor target = FromVector(std::vector<int64_t>{1, 0, 4, 2, 2, 3}, {6});
  CheckOp("LogSoftmax", {Rand({6, 5}, 1, -3.0f, 3.0f)}, [](auto& v) { return LogSoftmax(v[0], 1); });
  CheckOp("CrossEntropy", {Rand({6, 5}, 1, -3.0f, 3.0f)}, [&](auto& v) {
    return CrossEntropy(v[0], v[0].device().is_cuda() ? ToDevice(target, kGpu) : target);
  });
  CheckOp("NllLoss", {Rand({6, 5}, 1, -3.0f, 3.0f)}, [&](auto& v) {
    return NllLoss(LogSoftmax(v[0], 1), v[0].device().is_cuda() ? ToDevice(target, kGpu) : target);
  });
  // Host targets with CUDA logits are checked and copied.
  CheckOp("CrossEntropyHostTarget", {Rand({6, 5}, 1)}, [&](auto& v) { return CrossEntropy(v[0], target); });
}

TEST_F(CudaOpsTest, DropoutKeepsExpectedFraction) {
  Generator gen(3);
  Tensor x = Ones({1 << 16}, DType::kFloat32, kGpu);
  Tensor y = Dropout(x, 0.25f, true, gen);
  const std::vector<float> v = y.ToVector<float>();
  int64_t kept = 0;
  for (float e : v) {
    ASSERT_TRUE(e == 0.0f || std::fabs(e - 1.0f / 0.75f) < 1e-6f);
    kept += e != 0.0f;
  }
  EXPECT_NEAR(static_cast<double>(kept) / v.size(), 0.75, 0.01);
}

TEST_F(CudaOpsTest, CachingAllocatorReusesBlocks) {
  for (int i = 0; i < 3; ++i) Tensor t = Tensor::Empty({1 << 20}, DType::kFloat32, kGpu);  // warm
  const cuda::MemoryStats before = cuda::GetMemoryStats(0);
  for (int i = 0; i < 100; ++i) Tensor t = Tensor::Empty({1 << 20}, DType::kFloat32, kGpu);
  const cuda::MemoryStats after = cuda::GetMemoryStats(0);
  EXPECT_EQ(after.cuda_malloc_calls, before.cuda_malloc_calls) << cuda::MemoryStatsToString(after);
  EXPECT_GE(after.cache_hits, before.cache_hits + 100);
  std::printf("%s\n", cuda::MemoryStatsToString(after).c_str());
}

#endif  // DDP_WITH_CUDA

}  // namespace
}  // namespace ddp
