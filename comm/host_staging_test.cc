// HostStaging: CPU tensors pass through untouched (no copy); in CUDA builds with a GPU, a device
// tensor's round trip through the host carries the values both ways.
#include "comm/host_staging.h"

#include <gtest/gtest.h>

#include <vector>

#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/cuda_test.h"

namespace ddp {
namespace {

// A CPU tensor is not staged: the collective works on the caller's own memory, and CopyBack is a no-op
// that leaves the collective's result in place.
TEST(HostStagingTest, CpuTensorIsUsedInPlace) {
  Tensor t = FromVector(std::vector<float>{1, 2, 3}, {3});
  auto staging = HostStaging::Begin(t);
  ASSERT_TRUE(staging.ok()) << staging.status();
  EXPECT_FALSE((*staging)->staged());
  absl::StatusOr<Tensor> host = (*staging)->CopyToHost(absl::Seconds(1));
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(host->raw_data(), t.raw_data());
  host->data<float>()[1] = 7;  // what a collective would write
  ASSERT_TRUE((*staging)->CopyBack(absl::Seconds(1)).ok());
  EXPECT_EQ(t.ToVector<float>(), (std::vector<float>{1, 7, 3}));
}

#ifdef DDP_WITH_CUDA

using HostStagingCudaTest = CudaTest;

// A CUDA tensor written by a kernel just before Begin: the host copy holds the kernel's values (the copy
// waited for it), and the host's changes are in device memory once CopyBack returned.
TEST_F(HostStagingCudaTest, CudaTensorRoundTripsThroughTheHost) {
  Tensor t = Tensor::Empty({4096}, DType::kFloat32, Device::CUDA(0));
  FillInPlace(t, 2.5f);
  auto staging = HostStaging::Begin(t);
  ASSERT_TRUE(staging.ok()) << staging.status();
  EXPECT_TRUE((*staging)->staged());
  absl::StatusOr<Tensor> host = (*staging)->CopyToHost(absl::Seconds(30));
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_TRUE(host->device().is_cpu());
  for (float v : host->ToVector<float>()) ASSERT_EQ(v, 2.5f);
  for (int64_t i = 0; i < host->numel(); ++i) host->data<float>()[i] = static_cast<float>(i);
  ASSERT_TRUE((*staging)->CopyBack(absl::Seconds(30)).ok());
  const std::vector<float> back = t.ToVector<float>();
  for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], static_cast<float>(i));
}

#endif  // DDP_WITH_CUDA

}  // namespace
}  // namespace ddp
