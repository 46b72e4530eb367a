// MakeCudaBackwardTimer (DeviceBackwardTimer over CUDA events) on the GPU: DDP over NCCL at world size 1
// with every bucket forced through NCCL (ReducerAblations::reduce_at_world_size_1), timed with CUDA events
// around backward. Skips with a printed reason without a GPU (or without --config=cuda).
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/cuda_test.h"
#ifdef DDP_WITH_CUDA
#include "ddp/cuda_backward_timer.h"
#include "ddp/distributed_data_parallel.h"
#include "nn/models.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/nccl_test.h"
#endif

namespace ddp {
namespace {

#ifndef DDP_WITH_CUDA

DDP_CUDA_TESTS_NEED_A_CUDA_BUILD(CudaBackwardTimerTest)

#else

const Device kGpu = Device::CUDA(0);

using CudaBackwardTimerTest = NcclWorldOneTest;

struct TimedRun {
  std::vector<DeviceBackwardStats> history;
  double wall_s = 0;  // host wall clock from before the first mark until Flush returned
};

// `steps` DDP steps of the cnn on batches of `batch` samples on the GPU, the first `marked` of them timed;
// then Flush.
TimedRun RunTimedSteps(ProcessGroup* group, int batch, int steps, int marked) {
  Generator generator(3), data(4);
  auto model = MakeModel("cnn", generator).value();
  for (const Tensor& p : model->Parameters()) cuda::MoveToDeviceInPlace(p, kGpu);
  DdpOptions options;
  options.reducer.ablations.reduce_at_world_size_1 = true;
  options.reducer.caps.bucket_cap_bytes = 0;  // one bucket per parameter, each through NCCL
  auto ddp_model = DistributedDataParallel::Create(model, group, options);
  EXPECT_TRUE(ddp_model.ok()) << ddp_model.status();
  if (!ddp_model.ok()) return {};
  auto timer = MakeCudaBackwardTimer(kGpu).value();
  (*ddp_model)->AddReducerObserver(timer.get());
  const Tensor x = ToDevice(Uniform({batch, 1, 28, 28}, 0.0f, 1.0f, data), kGpu);
  std::vector<int64_t> labels;
  for (int i = 0; i < batch; ++i) labels.push_back(i % 10);
  const Tensor y = FromVector(labels, {batch}, kGpu);
  const absl::Time start = absl::Now();
  for (int step = 0; step < steps; ++step) {
    Tensor loss = CrossEntropy((*ddp_model)->Forward(x), y);
    if (step < marked) timer->MarkBackwardStart();
    loss.Backward();
    EXPECT_TRUE((*ddp_model)->status().ok()) << (*ddp_model)->status();
  }
  EXPECT_TRUE(timer->Flush(absl::Seconds(60)).ok()) << timer->status();
  return {timer->history(), absl::ToDoubleSeconds(absl::Now() - start)};
}

TEST_F(CudaBackwardTimerTest, RefusesTheCpu) {
  auto timer = MakeCudaBackwardTimer(Device::CPU());
  ASSERT_FALSE(timer.ok());
  EXPECT_EQ(timer.status().code(), absl::StatusCode::kFailedPrecondition);
}

// Every marked iteration is timed, in order, and no unmarked one; each device interval is positive,
// compute ends no later than the synchronised end, and all of them fit in the host's wall clock around
// the run (the device cannot have worked longer than the time that passed).
TEST_F(CudaBackwardTimerTest, TimesEveryMarkedIterationWithinTheWallClock) {
  const TimedRun run = RunTimedSteps(group_.get(), 32, /*steps=*/5, /*marked=*/3);
  ASSERT_EQ(run.history.size(), 3u);
  double total = 0;
  for (size_t i = 0; i < run.history.size(); ++i) {
    const DeviceBackwardStats& s = run.history[i];
    EXPECT_EQ(s.iteration, static_cast<int64_t>(i));
    EXPECT_GT(s.backward_compute_s, 0.0);
    EXPECT_LE(s.backward_compute_s, s.backward_synced_s);
    EXPECT_GT(s.host_backward_compute_s, 0.0);
    total += s.backward_synced_s;
  }
  EXPECT_LE(total, run.wall_s);
  EXPECT_NE(FormatDeviceBackwardStats(run.history).find("over 2 iterations"), std::string::npos)
      << FormatDeviceBackwardStats(run.history);
}

// The device time follows the work: the cnn's backward on 1024 samples takes longer on the device than
// on 8 (about 128x the arithmetic; launch overheads cannot hide that).
TEST_F(CudaBackwardTimerTest, DeviceTimeGrowsWithTheBatch) {
  const TimedRun small = RunTimedSteps(group_.get(), 8, 4, 4);
  const TimedRun large = RunTimedSteps(group_.get(), 1024, 4, 4);
  ASSERT_EQ(small.history.size(), 4u);
  ASSERT_EQ(large.history.size(), 4u);
  // The last iteration of each (warm caches and allocator).
  EXPECT_GT(large.history.back().backward_compute_s, small.history.back().backward_compute_s)
      << FormatDeviceBackwardStats(small.history) << FormatDeviceBackwardStats(large.history);
}

#endif  // DDP_WITH_CUDA

}  // namespace
}  // namespace ddp
