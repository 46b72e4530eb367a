// The BatchNorm block sizes (tensor/batch_norm_block_size.h): the channels per block of each size, and the
// measured choice: the first calls alternate the sizes, later calls keep the one whose fastest call was
// shorter, per pass and shape. The numbers of both sizes agree bit for bit
// (//tensor:batch_norm_blocked_test).
#include "tensor/batch_norm_block_size.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "tensor/threads.h"

namespace ddp {
namespace {

TEST(BatchNormBlockSizeTest, ChannelsPerBlockOfEachSize) {
  // ResNet-18's layer1 at batch 64: 200 KB channels, so one per 256 KB block.
  const BatchNormShape layer1{64, 64, 28 * 28};
  EXPECT_EQ(BatchNormChannelsPerBlock(layer1, BatchNormBlockSize::kCacheSized, 1), 1);
  EXPECT_EQ(BatchNormChannelsPerBlock(layer1, BatchNormBlockSize::kStreaming, 1), 64);
  EXPECT_EQ(BatchNormChannelsPerBlock(layer1, BatchNormBlockSize::kStreaming, 2), 32);
  EXPECT_EQ(BatchNormChannelsPerBlock(layer1, BatchNormBlockSize::kStreaming, 3), 22);
  // 416-byte channels: 630 to a 256 KB block.
  const BatchNormShape small{8, 700, 13};
  EXPECT_EQ(BatchNormChannelsPerBlock(small, BatchNormBlockSize::kCacheSized, 1), 630);
  EXPECT_EQ(BatchNormChannelsPerBlock(small, BatchNormBlockSize::kStreaming, 1), 700);
  // Never more than the channels, never fewer than one.
  const BatchNormShape tiny{2, 3, 4};
  EXPECT_EQ(BatchNormChannelsPerBlock(tiny, BatchNormBlockSize::kCacheSized, 1), 3);
  EXPECT_EQ(BatchNormChannelsPerBlock(tiny, BatchNormBlockSize::kStreaming, 8), 1);
}

// Runs one "pass" of shape s that takes `slow_ms` longer with the size of `slow_per_block` channels, and
// returns the channels per block it was given.
int64_t TimedPass(bool backward, const BatchNormShape& s, int64_t slow_per_block, int slow_ms) {
  const BatchNormBlockChoice choice(backward, s);
  if (choice.channels_per_block() == slow_per_block) {
    std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
  }
  return choice.channels_per_block();
}

TEST(BatchNormBlockSizeTest, KeepsTheSizeWhoseCallsWereFaster) {
  const int threads = GetNumThreads();
  SetNumThreads(1);
  SetBatchNormBlockSizeForTesting(BatchNormBlockSize::kAuto);
  // Two shapes of the layer1 kind (1 channel per cached block, all per streaming block), each with its
  // own measurement: the first is slow when streaming, the second when cache-sized.
  const BatchNormShape streaming_slow{64, 16, 28 * 28}, cached_slow{64, 24, 28 * 28};
  std::vector<int64_t> first, second;
  for (int call = 0; call < kBatchNormBlockTrialCalls + 3; ++call) {
    first.push_back(TimedPass(false, streaming_slow, /*slow_per_block=*/16, 20));
    second.push_back(TimedPass(false, cached_slow, /*slow_per_block=*/1, 20));
  }
  const std::vector<int64_t> expected_first = {1, 16, 1, 16, 1, 1, 1};
  const std::vector<int64_t> expected_second = {1, 24, 1, 24, 24, 24, 24};
  EXPECT_EQ(first, expected_first);
  EXPECT_EQ(second, expected_second);
  // The backward pass of the same shape is measured on its own.
  EXPECT_EQ(TimedPass(true, streaming_slow, 1, 0), 1);
  EXPECT_EQ(TimedPass(true, streaming_slow, 1, 0), 16);
  SetNumThreads(threads);
}

TEST(BatchNormBlockSizeTest, AFixedSizeIsNotMeasured) {
  const BatchNormShape s{64, 8, 28 * 28};
  SetBatchNormBlockSizeForTesting(BatchNormBlockSize::kStreaming);
  const int threads = GetNumThreads();
  SetNumThreads(1);
  for (int call = 0; call < 3; ++call) EXPECT_EQ(BatchNormBlockChoice(false, s).channels_per_block(), 8);
  SetBatchNormBlockSizeForTesting(BatchNormBlockSize::kCacheSized);
  for (int call = 0; call < 3; ++call) EXPECT_EQ(BatchNormBlockChoice(false, s).channels_per_block(), 1);
  SetBatchNormBlockSizeForTesting(BatchNormBlockSize::kAuto);
  SetNumThreads(threads);
}

}  // namespace
}  // namespace ddp
