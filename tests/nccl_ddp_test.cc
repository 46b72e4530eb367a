// DDP and distributed evaluation over NCCL at world size 1 (NCCL refuses two ranks on one GPU), against
// the plain module and the CPU. Crosses comm, ddp, nn and data, so it lives here rather than in comm/.
// Skips with a printed reason where there is no GPU (or in builds without --config=cuda).
#include <cmath>
#include <cstdio>

#include "gtest/gtest.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/cuda_test.h"
#ifdef DDP_WITH_CUDA
#include "data/tensor_dataset.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/distributed_eval.h"
#include "ddp/sync_batch_norm.h"
#include "nn/models.h"
#include "tensor/cuda/cuda_ops.h"
#include "testing/nccl_test.h"
#endif

namespace ddp {
namespace {

#ifndef DDP_WITH_CUDA

DDP_CUDA_TESTS_NEED_A_CUDA_BUILD(NcclDdpTest)

#else

const Device kGpu = Device::CUDA(0);

using NcclDdpTest = NcclWorldOneTest;

// One DDP backward of `name` at world size 1 against the plain module; `forced` sends every bucket
// through NCCL.
void ExpectDdpGradientsEqualPlain(ProcessGroup* group, const std::string& name, bool forced) {
  Generator g1(5), g2(5);
  auto plain = MakeModel(name, g1).value();
  auto wrapped = MakeModel(name, g2).value();
  for (const Tensor& p : plain->Parameters()) cuda::MoveToDeviceInPlace(p, kGpu);
  for (const Tensor& p : wrapped->Parameters()) cuda::MoveToDeviceInPlace(p, kGpu);
  DdpOptions options;
  options.reducer.ablations.reduce_at_world_size_1 = forced;
  if (forced) options.reducer.caps.bucket_cap_bytes = 0;
  auto ddp_model = DistributedDataParallel::Create(wrapped, group, options);
  ASSERT_TRUE(ddp_model.ok()) << ddp_model.status();
  Generator data(9);
  Tensor x = ToDevice(Uniform({16, 1, 28, 28}, 0.0f, 1.0f, data), kGpu);
  std::vector<int64_t> labels;
  for (int i = 0; i < 16; ++i) labels.push_back(i % 10);
  Tensor y = FromVector(labels, {16}, kGpu);
  CrossEntropy(plain->Forward(x), y).Backward();
  CrossEntropy((*ddp_model)->Forward(x), y).Backward();
  ASSERT_TRUE((*ddp_model)->status().ok()) << (*ddp_model)->status();
  const auto a = plain->NamedParameters(), b = wrapped->NamedParameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<float> ga = a[i].second.grad().ToVector<float>();
    const std::vector<float> gb = b[i].second.grad().ToVector<float>();
    ASSERT_EQ(ga.size(), gb.size());
    for (size_t e = 0; e < ga.size(); ++e) {
      ASSERT_NEAR(ga[e], gb[e], 1e-6f) << name << " " << a[i].first << (forced ? " (forced buckets)" : "");
    }
  }
}

// DDP over NCCL at world size 1 gives exactly the plain module's gradients (averaging over one rank),
// both on the pass-through path and with every bucket forced through NCCL on the communication stream
// (ReducerAblations::reduce_at_world_size_1, one bucket per parameter).
TEST_F(NcclDdpTest, DdpGradientsEqualPlainModule) {
  for (const bool forced : {false, true}) {
    for (const std::string name : {"mlp", "cnn"}) ExpectDdpGradientsEqualPlain(group_.get(), name, forced);
  }
}

// SyncBatchNorm2d on the GPU over NCCL at world size 1 is plain BatchNorm2d: the same output, input
// gradients and running statistics (its all-reduces of device tensors go through NCCL).
TEST_F(NcclDdpTest, SyncBatchNormOnTheGpuEqualsBatchNorm) {
  Generator g1(6), g2(6), data(8);
  auto plain = MakeModel("cnn_bn", g1).value();
  auto synced = MakeModel("cnn_bn", g2).value();
  for (auto* m : {plain.get(), synced.get()}) {
    for (const Tensor& p : m->Parameters()) cuda::MoveToDeviceInPlace(p, kGpu);
    for (const Tensor& b : m->Buffers()) cuda::MoveToDeviceInPlace(b, kGpu);
  }
  ASSERT_EQ(ConvertSyncBatchNorm(*synced, group_.get()), 2);
  Tensor x = ToDevice(Uniform({8, 1, 28, 28}, 0.0f, 1.0f, data), kGpu);
  std::vector<int64_t> labels;
  for (int i = 0; i < 8; ++i) labels.push_back(i % 10);
  Tensor y = FromVector(labels, {8}, kGpu);
  CrossEntropy(plain->Forward(x), y).Backward();
  CrossEntropy(synced->Forward(x), y).Backward();
  const auto a = plain->NamedParameters(), b = synced->NamedParameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<float> ga = a[i].second.grad().ToVector<float>(), gb = b[i].second.grad().ToVector<float>();
    for (size_t e = 0; e < ga.size(); ++e) ASSERT_NEAR(ga[e], gb[e], 1e-4f * (1 + std::fabs(ga[e]))) << a[i].first;
  }
  const auto sa = plain->StateDict(), sb = synced->StateDict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    if (sa[i].second.dtype() != DType::kFloat32) {
      EXPECT_EQ(sa[i].second.ToVector<int64_t>(), sb[i].second.ToVector<int64_t>()) << sa[i].first;
      continue;
    }
    const std::vector<float> va = sa[i].second.ToVector<float>(), vb = sb[i].second.ToVector<float>();
    for (size_t e = 0; e < va.size(); ++e) ASSERT_NEAR(va[e], vb[e], 1e-5f * (1 + std::fabs(va[e]))) << sa[i].first;
  }
}

// Distributed evaluation of a model on the GPU (batches copied there, totals reduced over NCCL) equals
// evaluating a CPU copy of it.
TEST_F(NcclDdpTest, EvaluationOnTheGpuEqualsTheCpu) {
  Generator g1(3), g2(3), data(4);
  auto on_cpu = MakeModel("cnn", g1).value();
  auto on_gpu = MakeModel("cnn", g2).value();
  for (const Tensor& p : on_gpu->Parameters()) cuda::MoveToDeviceInPlace(p, kGpu);
  std::vector<int64_t> labels;
  for (int i = 0; i < 300; ++i) labels.push_back(i % 10);
  TensorDataset dataset(Uniform({300, 1, 28, 28}, 0.0f, 1.0f, data), FromVector(labels, {300}));
  DistributedEvalOptions options;
  options.batch_size = 64;
  auto cpu = EvaluateDistributed(*on_cpu, dataset, nullptr, options);
  auto gpu = EvaluateDistributed(*on_gpu, dataset, group_.get(), options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->count, 300);
  EXPECT_NEAR(gpu->accuracy, cpu->accuracy, 2.0 / 300);  // a near-tie may flip one argmax
  EXPECT_NEAR(gpu->loss, cpu->loss, 1e-4);
}

#endif  // DDP_WITH_CUDA

}  // namespace
}  // namespace ddp
