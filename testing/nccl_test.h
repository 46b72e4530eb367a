// Test-only fixture for NCCL tests at world size 1 (NCCL refuses two ranks on one GPU): skips with a
// printed reason where there is no usable GPU (CudaTest), otherwise creates a one-rank ProcessGroupNccl
// over an in-memory store. Only in builds with --config=cuda; files include it under DDP_WITH_CUDA.
#ifndef DDP_TESTING_NCCL_TEST_H_
#define DDP_TESTING_NCCL_TEST_H_

#ifdef DDP_WITH_CUDA
#include <memory>

#include "store/memory_store.h"
#include "comm/nccl/process_group_nccl.h"
#include "testing/cuda_test.h"

namespace ddp {

// group_ is a ready one-rank NCCL group in every test body that was not skipped.
class NcclWorldOneTest : public CudaTest {
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

}  // namespace ddp
#endif  // DDP_WITH_CUDA

#endif  // DDP_TESTING_NCCL_TEST_H_
