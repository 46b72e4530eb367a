// Test-only support for GPU tests, which must skip with a printed reason where they cannot run.
//   * In a build without --config=cuda: DDP_CUDA_TESTS_NEED_A_CUDA_BUILD(Suite) defines the one test of
//     the file, which prints "SKIPPED: built without --config=cuda" and skips.
//   * In a CUDA build: derive fixtures from CudaTest, which skips every test (printing
//     "SKIPPED: <reason>") when there is no usable GPU. A subclass's SetUp calls CudaTest::SetUp() first
//     and returns if IsSkipped().
#ifndef DDP_TESTING_CUDA_TEST_H_
#define DDP_TESTING_CUDA_TEST_H_

#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_check.h"
#endif

#define DDP_CUDA_TESTS_NEED_A_CUDA_BUILD(suite)              \
  TEST(suite, SkippedWithoutCudaBuild) {                     \
    std::printf("SKIPPED: built without --config=cuda\n");  \
    GTEST_SKIP() << "built without --config=cuda";           \
  }

#ifdef DDP_WITH_CUDA
namespace ddp {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::Status available = cuda::CudaDeviceAvailable();
    if (!available.ok()) {
      std::printf("SKIPPED: %s\n", std::string(available.message()).c_str());
      GTEST_SKIP() << available.message();
    }
  }
};

}  // namespace ddp
#endif  // DDP_WITH_CUDA

#endif  // DDP_TESTING_CUDA_TEST_H_
