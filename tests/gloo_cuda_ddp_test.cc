// Two ranks on one GPU over Gloo with CUDA tensors staged through the host (Note [Host staging] in
// comm/host_staging.cc): the only way to run device buckets with two ranks on one GPU, since NCCL
// refuses two ranks on one device. Ranks are threads of this process (testing/run_ranks.h). Crosses comm,
// ddp and nn, so it lives here. Skips with a printed reason without a GPU (or without --config=cuda).
#include <cmath>
#include <cstdio>

#include "gtest/gtest.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/cuda_test.h"
#ifdef DDP_WITH_CUDA
#include "ddp/distributed_data_parallel.h"
#include "nn/models.h"
#include "tensor/cuda/cuda_ops.h"
#include "testing/run_ranks.h"
#endif

namespace ddp {
namespace {

#ifndef DDP_WITH_CUDA

DDP_CUDA_TESTS_NEED_A_CUDA_BUILD(GlooCudaDdpTest)

#else

const Device kGpu = Device::CUDA(0);
constexpr int kWorld = 2;

using GlooCudaDdpTest = CudaTest;

// AllReduce (sum and avg) and Broadcast of CUDA tensors over Gloo equal the hand-computed values; the
// tensors were written by a kernel just before the call, so the staging copy must wait for it.
TEST_F(GlooCudaDdpTest, CollectivesOfCudaTensorsEqualHandComputedValues) {
  RunRanks(kWorld, [](int rank, ProcessGroup& group) {
    Tensor sum = Tensor::Empty({1000}, DType::kFloat32, kGpu);
    FillInPlace(sum, static_cast<float>(rank + 1));  // a kernel on this thread's current stream
    ASSERT_TRUE(group.AllReduce(sum, ReduceOp::kSum)->Wait(absl::Seconds(60)).ok());
    for (float v : sum.ToVector<float>()) ASSERT_EQ(v, 3.0f);  // 1 + 2
    Tensor avg = Tensor::Empty({7}, DType::kFloat32, kGpu);
    FillInPlace(avg, static_cast<float>(2 * rank));
    ASSERT_TRUE(group.AllReduce(avg, ReduceOp::kAvg)->Wait(absl::Seconds(60)).ok());
    for (float v : avg.ToVector<float>()) ASSERT_EQ(v, 1.0f);  // (0 + 2) / 2
    Tensor labels = FromVector(std::vector<int64_t>{rank * 10, rank * 10 + 1, rank * 10 + 2}, {3}, kGpu);
    ASSERT_TRUE(group.Broadcast(labels, /*root=*/1)->Wait(absl::Seconds(60)).ok());
    EXPECT_EQ(labels.ToVector<int64_t>(), (std::vector<int64_t>{10, 11, 12}));
  });
}

// The gradients of `name` from one backward of the plain module on the joint batch (x, y), on the GPU.
std::vector<std::vector<float>> PlainGradients(const std::string& name, const Tensor& x, const Tensor& y) {
  Generator generator(5);
  auto plain = MakeModel(name, generator).value();
  for (const Tensor& p : plain->Parameters()) cuda::MoveToDeviceInPlace(p, kGpu);
  CrossEntropy(plain->Forward(x), y).Backward();
  std::vector<std::vector<float>> grads;
  for (const Tensor& p : plain->Parameters()) grads.push_back(p.grad().ToVector<float>());
  return grads;
}

// DDP over Gloo at world size 2 with CUDA parameters, on the bucketed path (small buckets, so several
// travel during backward): each rank backpropagates its half of the batch, and every rank's averaged
// gradients equal the plain module's on the joint batch. Rank 1 starts from other weights, so the
// wrap-time broadcast (CUDA tensors too) must make it rank 0's.
TEST_F(GlooCudaDdpTest, DdpGradientsOnTwoRanksEqualOneProcessOnTheJointBatch) {
  for (const std::string name : {"mlp", "cnn"}) {
    Generator data(9);
    const Tensor x = ToDevice(Uniform({16, 1, 28, 28}, 0.0f, 1.0f, data), kGpu);
    std::vector<int64_t> labels;
    for (int i = 0; i < 16; ++i) labels.push_back((i * 7) % 10);
    const Tensor y = FromVector(labels, {16}, kGpu);
    const std::vector<std::vector<float>> expected = PlainGradients(name, x, y);
    RunRanks(kWorld, [&](int rank, ProcessGroup& group) {
      Generator generator(rank == 0 ? 5 : 77);
      auto model = MakeModel(name, generator).value();
      for (const Tensor& p : model->Parameters()) cuda::MoveToDeviceInPlace(p, kGpu);
      DdpOptions options;
      options.reducer.caps.first_bucket_cap_bytes = 4 << 10;
      options.reducer.caps.bucket_cap_bytes = 16 << 10;
      auto ddp_model = DistributedDataParallel::Create(model, &group, options);
      ASSERT_TRUE(ddp_model.ok()) << ddp_model.status();
      const Tensor my_x = Contiguous(Narrow(x, 0, rank * 8, 8));
      const Tensor my_y = Contiguous(Narrow(y, 0, rank * 8, 8));
      CrossEntropy((*ddp_model)->Forward(my_x), my_y).Backward();
      ASSERT_TRUE((*ddp_model)->status().ok()) << (*ddp_model)->status();
      const std::vector<Tensor> params = model->Parameters();
      ASSERT_EQ(params.size(), expected.size());
      for (size_t i = 0; i < params.size(); ++i) {
        const std::vector<float> got = params[i].grad().ToVector<float>();
        ASSERT_EQ(got.size(), expected[i].size());
        for (size_t e = 0; e < got.size(); ++e) {
          ASSERT_NEAR(got[e], expected[i][e], 1e-5f * (1 + std::fabs(expected[i][e])))
              << name << " rank " << rank << " " << params[i].name() << "[" << e << "]";
        }
      }
    });
  }
}

#endif  // DDP_WITH_CUDA

}  // namespace
}  // namespace ddp
