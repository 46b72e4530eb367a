// ProcessGroupNccl at world size 1 (NCCL refuses two ranks on one GPU): the collectives'
// results, stream ordering, host staging. DDP over NCCL is tested in tests/nccl_ddp_test.cc. Skips with a
// printed reason where there is no GPU (or in builds without --config=cuda).
#include <cstdio>

#include "gtest/gtest.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/cuda_test.h"
#ifdef DDP_WITH_CUDA
#include "comm/nccl/process_group_nccl.h"
#include "testing/nccl_test.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_ops.h"
#endif

namespace ddp {
namespace {

#ifndef DDP_WITH_CUDA

DDP_CUDA_TESTS_NEED_A_CUDA_BUILD(ProcessGroupNcclTest)

#else

const Device kGpu = Device::CUDA(0);

using ProcessGroupNcclTest = NcclWorldOneTest;

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

#endif  // DDP_WITH_CUDA

}  // namespace
}  // namespace ddp
