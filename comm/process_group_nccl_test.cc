// ProcessGroupNccl at world size 1 (NCCL refuses two ranks on one GPU, shared/FACTS.md) and DDP over it:
// the collectives' results, stream ordering, and DDP's gradients against the plain module's. Skips with
// a printed reason where there is no GPU (or in builds without --config=cuda).
#include <cstdio>

#include "gtest/gtest.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/cuda_test.h"
#ifdef DDP_WITH_CUDA
#include "comm/memory_store.h"
#include "comm/process_group_nccl.h"
#include "data/tensor_dataset.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/distributed_eval.h"
#include "nn/models.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_ops.h"
#endif

namespace ddp {
namespace {

#ifndef DDP_WITH_CUDA

DDP_CUDA_TESTS_NEED_A_CUDA_BUILD(ProcessGroupNcclTest)

#else

const Device kGpu = Device::CUDA(0);

class ProcessGroupNcclTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    auto group = ProcessGroupNccl::Create(store_, 0, 1);
    ASSERT_TRUE(group.ok()) << group.status();
    group_ = std::move(*group);
  }
  MemoryStore store_;
  std::unique_ptr<ProcessGroupNccl> group_;
};

TEST_F(ProcessGroupNcclTest, CollectivesAtWorldSizeOne) {
  Tensor t = FromVector(std::vector<float>{1, 2, 3, 4}, {4}, kGpu);
  // Written on the compute stream, reduced on the communication stream: the event orders them.
  Tensor doubled = MulScalar(t, 2.0f);
  auto work = group_->AllReduce(doubled, ReduceOp::kSum);
  ASSERT_TRUE(work->WaitStream().ok());
  EXPECT_EQ(AddScalar(doubled, 1.0f).ToVector<float>(), (std::vector<float>{3, 5, 7, 9}));
  ASSERT_TRUE(group_->AllReduce(doubled, ReduceOp::kAvg)->Wait(absl::Seconds(30)).ok());
  ASSERT_TRUE(group_->Broadcast(doubled, 0)->Wait(absl::Seconds(30)).ok());
  Tensor gathered = Zeros({4}, DType::kFloat32, kGpu);
  ASSERT_TRUE(group_->AllGather({gathered}, doubled)->Wait(absl::Seconds(30)).ok());
  EXPECT_EQ(gathered.ToVector<float>(), (std::vector<float>{2, 4, 6, 8}));
  Tensor scattered = Zeros({4}, DType::kFloat32, kGpu);
  ASSERT_TRUE(group_->ReduceScatter(scattered, {doubled})->Wait(absl::Seconds(30)).ok());
  EXPECT_EQ(scattered.ToVector<float>(), (std::vector<float>{2, 4, 6, 8}));
  ASSERT_TRUE(group_->Barrier()->Wait(absl::Seconds(30)).ok());
  auto timed = group_->AllReduce(doubled);
  ASSERT_TRUE(timed->Wait(absl::Seconds(30)).ok());
  EXPECT_TRUE(timed->IsCompleted());
  EXPECT_GE(timed->ExecutionSeconds(), 0.0);
}

TEST_F(ProcessGroupNcclTest, RejectsHostTensors) {
  Tensor host = Ones({4});
  absl::Status status = group_->AllReduce(host)->Wait(absl::Seconds(5));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

// DDP over NCCL at world size 1 gives exactly the plain module's gradients (averaging over one rank).
TEST_F(ProcessGroupNcclTest, DdpGradientsEqualPlainModule) {
  for (const std::string name : {"mlp", "cnn"}) {
    Generator g1(5), g2(5);
    auto plain = MakeModel(name, g1).value();
    auto wrapped = MakeModel(name, g2).value();
    for (const Tensor& p : plain->Parameters()) cuda::MoveToDeviceInPlace(p, kGpu);
    for (const Tensor& p : wrapped->Parameters()) cuda::MoveToDeviceInPlace(p, kGpu);
    auto ddp_model = DistributedDataParallel::Create(wrapped, group_.get(), DdpOptions{});
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
      for (size_t e = 0; e < ga.size(); ++e) ASSERT_NEAR(ga[e], gb[e], 1e-6f) << name << " " << a[i].first;
    }
  }
}

// Object collectives and host all-reduces stage through the GPU (NCCL takes device tensors only).
TEST_F(ProcessGroupNcclTest, ObjectCollectivesAndHostReducesStageThroughTheGpu) {
  EXPECT_EQ(group_->tensor_device(), kGpu);
  std::string data = "rank zero's bytes";
  ASSERT_TRUE(group_->BroadcastObject(&data, 0).ok());
  EXPECT_EQ(data, "rank zero's bytes");
  std::vector<std::string> all;
  ASSERT_TRUE(group_->AllGatherObject("mine", &all).ok());
  EXPECT_EQ(all, (std::vector<std::string>{"mine"}));
  Tensor totals = FromVector(std::vector<int64_t>{7, 8, 9}, {3});
  ASSERT_TRUE(group_->AllReduceHost(totals).ok());
  EXPECT_EQ(totals.ToVector<int64_t>(), (std::vector<int64_t>{7, 8, 9}));
}

// Distributed evaluation of a model on the GPU (batches copied there, totals reduced over NCCL) equals
// evaluating a CPU copy of it.
TEST_F(ProcessGroupNcclTest, EvaluationOnTheGpuEqualsTheCpu) {
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
