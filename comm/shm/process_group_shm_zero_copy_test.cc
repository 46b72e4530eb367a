// Note [Zero-copy all-reduce]: all-reduces of tensors from ProcessGroupShm::NewCommBuffer (read in place
// from the owner's shared heap) against the sequential reference, for world 2-4, every op, sizes across
// chunk and slice edges, ranks that mix heap and ordinary tensors, and slot collectives between them;
// a buffer may be overwritten as soon as its Work completes; zero-copy off on one rank turns it off on all.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "comm/shm/process_group_shm.h"
#include "testing/shm_test_util.h"
#include "gtest/gtest.h"
#include "tensor/tensor.h"

namespace ddp {
namespace {

using shm_test::Input;
using shm_test::Reference;
using shm_test::RunShmRanks;
using shm_test::Values;

// `values` copied into a tensor from `group`'s heap (heap = true) or an ordinary one.
template <typename T>
Tensor Placed(ProcessGroupShm& group, const Tensor& values, bool heap) {
  Tensor t = heap ? group.NewCommBuffer(values.numel(), values.dtype(), Device::CPU())
                  : Tensor::Empty({values.numel()}, values.dtype());
  std::memcpy(t.raw_data(), values.raw_data(), values.nbytes());
  return t;
}

enum class Placement { kAllHeap, kEvenRanksHeap, kOnlyRankZeroOrdinary };

bool InHeap(Placement placement, int rank) {
  switch (placement) {
    case Placement::kAllHeap:
      return true;
    case Placement::kEvenRanksHeap:
      return rank % 2 == 0;
    case Placement::kOnlyRankZeroOrdinary:
      return rank != 0;
  }
  return true;
}

struct ZeroCopyConfig {
  int world;
  size_t slot_bytes;
  Placement placement;
};

std::string ConfigName(const ZeroCopyConfig& config) {
  const char* placement = config.placement == Placement::kAllHeap         ? "all_heap"
                          : config.placement == Placement::kEvenRanksHeap ? "even_ranks_heap"
                                                                          : "rank0_ordinary";
  return absl::StrCat("world", config.world, "_slot", config.slot_bytes, "_", placement);
}

class ShmZeroCopyTest : public ::testing::TestWithParam<ZeroCopyConfig> {
 protected:
  ProcessGroupShmOptions Options() const {
    ProcessGroupShmOptions options;
    options.timeout = absl::Seconds(60);
    options.channel.slot_bytes = GetParam().slot_bytes;
    options.small_allreduce_bytes = std::min<size_t>(options.small_allreduce_bytes, GetParam().slot_bytes / 4);
    options.inline_allreduce_bytes = 0;  // the inline path has its own tests; here every call is queued
    options.zero_copy_min_bytes = 0;     // every large-path chunk in place, whatever its size
    return options;
  }

  template <typename T>
  void CheckAllReduces(DType dtype) {
    const int world = GetParam().world;
    RunShmRanks(world, [&](int rank, ProcessGroupShm& group) {
      EXPECT_EQ(group.zero_copy_off_reason(), "");
      const bool heap = InHeap(GetParam().placement, rank);
      for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{5000}, int64_t{300001}}) {
        int salt = 0;
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
          Tensor t = Placed<T>(group, Input<T>(rank, n, ++salt % 3, dtype), heap);
          ASSERT_TRUE(group.AllReduce(t, op)->Wait(absl::Seconds(60)).ok());
          EXPECT_EQ(Values<T>(t), Reference<T>(world, n, salt % 3, op)) << ReduceOpName(op) << " n=" << n;
          // A slot collective right after: it must not read the heap record the all-reduce left.
          Tensor out = Tensor::Empty({n}, dtype);
          std::vector<Tensor> inputs;
          for (int c = 0; c < world; ++c) inputs.push_back(Input<T>(rank + c, n, 0, dtype));
          ASSERT_TRUE(group.ReduceScatter(out, inputs, op)->Wait(absl::Seconds(60)).ok());
          EXPECT_EQ(Values<T>(out), Reference<T>(world, n, 0, op, rank)) << "ReduceScatter n=" << n;
        }
      }
    }, Options());
  }
};

TEST_P(ShmZeroCopyTest, Float32MatchesTheSequentialReference) { CheckAllReduces<float>(DType::kFloat32); }

TEST_P(ShmZeroCopyTest, Int64MatchesTheSequentialReference) { CheckAllReduces<int64_t>(DType::kInt64); }

INSTANTIATE_TEST_SUITE_P(
    WorldsSlotsPlacements, ShmZeroCopyTest,
    ::testing::Values(ZeroCopyConfig{2, 1 << 20, Placement::kAllHeap}, ZeroCopyConfig{3, 1 << 20, Placement::kAllHeap},
                      ZeroCopyConfig{4, 1 << 20, Placement::kAllHeap}, ZeroCopyConfig{3, 4096, Placement::kAllHeap},
                      ZeroCopyConfig{2, 1 << 20, Placement::kEvenRanksHeap},
                      ZeroCopyConfig{3, 4096, Placement::kEvenRanksHeap},
                      ZeroCopyConfig{4, 1 << 20, Placement::kOnlyRankZeroOrdinary}),
    [](const ::testing::TestParamInfo<ZeroCopyConfig>& info) { return ConfigName(info.param); });

TEST(ShmZeroCopyReuseTest, ABufferMayBeOverwrittenAsSoonAsItsWorkCompletes) {
  // The peers gather rank r's reduced slice from r's heap: r's Work must not complete before they did,
  // or what r writes next (here at once, as an optimizer or the next backward would) reaches their result.
  constexpr int64_t kCount = 200000;
  RunShmRanks(2, [&](int rank, ProcessGroupShm& group) {
    Tensor t = group.NewCommBuffer(kCount, DType::kFloat32, Device::CPU());
    const std::vector<float> expected = Reference<float>(2, kCount, 0, ReduceOp::kSum);
    for (int round = 0; round < 200; ++round) {
      std::memcpy(t.raw_data(), Input<float>(rank, kCount, 0, DType::kFloat32).raw_data(), t.nbytes());
      ASSERT_TRUE(group.AllReduce(t)->Wait(absl::Seconds(60)).ok());
      ASSERT_EQ(Values<float>(t), expected) << "round " << round << ", rank " << rank;
      std::memset(t.raw_data(), 0xff, t.nbytes());  // NaNs, at once
    }
  });
}

TEST(ShmZeroCopyReuseTest, BuffersOutliveTheirGroup) {
  Tensor kept;
  RunShmRanks(2, [&](int rank, ProcessGroupShm& group) {
    Tensor t = group.NewCommBuffer(1000, DType::kFloat32, Device::CPU());
    if (rank == 0) kept = t;
  });
  // The group is gone; the heap stays mapped while a tensor uses it.
  std::memset(kept.raw_data(), 0, kept.nbytes());
  EXPECT_EQ(Values<float>(kept)[999], 0.0f);
}

TEST(ShmZeroCopyOffTest, OneRankTurningItOffTurnsItOffForAllAndResultsStayRight) {
  MemoryStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      ProcessGroupShmOptions options;
      options.timeout = absl::Seconds(60);
      options.channel.zero_copy = rank != 1;
      auto group = ProcessGroupShm::Create(store, rank, 3, options);
      ASSERT_TRUE(group.ok()) << group.status();
      EXPECT_TRUE(absl::StrContains((*group)->zero_copy_off_reason(), "rank 1")) << (*group)->zero_copy_off_reason();
      Tensor t = (*group)->NewCommBuffer(100000, DType::kFloat32, Device::CPU());  // an ordinary tensor now
      std::memcpy(t.raw_data(), Input<float>(rank, 100000, 1, DType::kFloat32).raw_data(), t.nbytes());
      ASSERT_TRUE((*group)->AllReduce(t)->Wait(absl::Seconds(60)).ok());
      EXPECT_EQ(Values<float>(t), Reference<float>(3, 100000, 1, ReduceOp::kSum));
      EXPECT_TRUE((*group)->Barrier()->Wait(absl::Seconds(60)).ok());
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace ddp
