// How many channels one block of the channel-blocked BatchNorm passes takes (Note [BatchNorm block size by
// measurement]). Internal to tensor/batch_norm_blocked.cc, and its tests.
//
// Note [BatchNorm block size by measurement]
// The blocked passes (Note [BatchNorm in channel blocks]) walk a block of channels image by image, so
// within an image a block is one contiguous run of memory. Two sizes are each the faster on some CPU:
//   - kCacheSized: blocks of about 256 KB of input, so that a block's later passes find it in L2. One
//     channel of ResNet-18's layer1 at batch 64 is 200 KB, so its blocks are one channel: 64 runs of 3 KB,
//     200 KB apart. On an AMX Xeon (2 MB L2) these ran layer1's BatchNorm + ReLU about as fast as
//     whole-tensor passes channel by channel (9.8 against 10.1 ms) and layer2's 1.4x faster (BENCHMARKS.md
//     "bf16 mixed precision"); one block per thread was not measured there.
//   - kStreaming: one block per kernel thread (the whole tensor on one thread), so every pass is one
//     sequential stream through memory. On an AMD EPYC of family 26 (1 MB L2, 32 MB L3, which holds the
//     12.8 MB activation) layer1's forward + backward took 3.4 ms this way against 6.3 in 256 KB blocks,
//     layer2's 1.55 against 2.1-2.8 (tensor/conv_bench "bn+relu l").
// Every channel folds its rows in image order whatever the block, so both give the same numbers bit for
// bit, and the choice can be measured without changing a result: per thread, for each pass (forward,
// backward), shape and thread count, the first kBatchNormBlockTrialCalls calls alternate the two sizes and
// time themselves, and later calls keep the size with the shorter fastest call. Tensors whose two sizes
// give the same blocks are not measured. SetBatchNormBlockSizeForTesting fixes the choice.
#ifndef DDP_TENSOR_BATCH_NORM_BLOCK_SIZE_H_
#define DDP_TENSOR_BATCH_NORM_BLOCK_SIZE_H_

#include <chrono>
#include <cstdint>

#include "tensor/batch_norm_kernels.h"

namespace ddp {

enum class BatchNormBlockSize { kAuto, kCacheSized, kStreaming };

// Calls per pass and shape that measure (alternating the two sizes) before the choice is kept.
inline constexpr int kBatchNormBlockTrialCalls = 4;

// The channels per block of `size` (not kAuto) for shape s on `threads` kernel threads: >= 1, <= s.c.
int64_t BatchNormChannelsPerBlock(const BatchNormShape& s, BatchNormBlockSize size, int threads);

// One pass's block size, chosen when constructed by Note [BatchNorm block size by measurement]; while the
// pass is still being measured, the destructor records how long the object lived (construct it just
// before the pass, let it go just after). `backward` tells the two passes apart.
class BatchNormBlockChoice {
 public:
  BatchNormBlockChoice(bool backward, const BatchNormShape& s);
  ~BatchNormBlockChoice();
  BatchNormBlockChoice(const BatchNormBlockChoice&) = delete;
  BatchNormBlockChoice& operator=(const BatchNormBlockChoice&) = delete;

  // Channels per block for this pass.
  int64_t channels_per_block() const { return channels_per_block_; }

 private:
  double* trial_best_ms_ = nullptr;  // where to record this call's time; null once the choice is kept
  int64_t channels_per_block_ = 1;
  std::chrono::steady_clock::time_point start_;
};

// Fixes the block size of the passes that follow (kAuto: measure, the default). For tests; call while no
// BatchNorm runs.
void SetBatchNormBlockSizeForTesting(BatchNormBlockSize size);

}  // namespace ddp

#endif  // DDP_TENSOR_BATCH_NORM_BLOCK_SIZE_H_
