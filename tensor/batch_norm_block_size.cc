// The block size of the channel-blocked BatchNorm passes (contracts: tensor/batch_norm_block_size.h).
#include "tensor/batch_norm_block_size.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <tuple>

#include "tensor/threads.h"

namespace ddp {
namespace {

// The input bytes of one kCacheSized block: a few blocks of input, output and gradients fit in a 1-2 MB
// L2 cache.
constexpr int64_t kCacheBlockBytes = int64_t{256} << 10;

std::atomic<BatchNormBlockSize> fixed_size{BatchNormBlockSize::kAuto};

// The fastest call measured so far with each size ([0] kCacheSized, [1] kStreaming), and how many calls
// have measured.
struct Trials {
  int calls = 0;
  double best_ms[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
};

// {backward, n, c, inner, threads}: what a measurement holds for.
using TrialKey = std::tuple<bool, int64_t, int64_t, int64_t, int>;

}  // namespace

int64_t BatchNormChannelsPerBlock(const BatchNormShape& s, BatchNormBlockSize size, int threads) {
  const int64_t channels = std::max<int64_t>(s.c, 1);
  if (size == BatchNormBlockSize::kStreaming) {
    const int64_t blocks = std::max(threads, 1);
    return std::clamp<int64_t>((channels + blocks - 1) / blocks, 1, channels);
  }
  const int64_t channel_bytes = std::max<int64_t>(s.n * s.inner * static_cast<int64_t>(sizeof(float)), 1);
  return std::clamp<int64_t>(kCacheBlockBytes / channel_bytes, 1, channels);
}

BatchNormBlockChoice::BatchNormBlockChoice(bool backward, const BatchNormShape& s) {
  const int threads = GetNumThreads();
  const int64_t cache_sized = BatchNormChannelsPerBlock(s, BatchNormBlockSize::kCacheSized, threads);
  const int64_t streaming = BatchNormChannelsPerBlock(s, BatchNormBlockSize::kStreaming, threads);
  const BatchNormBlockSize fixed = fixed_size.load();
  if (fixed != BatchNormBlockSize::kAuto || cache_sized == streaming) {
    channels_per_block_ = fixed == BatchNormBlockSize::kStreaming ? streaming : cache_sized;
    return;
  }
  thread_local std::map<TrialKey, Trials> trials_by_key;
  Trials& trials = trials_by_key[TrialKey{backward, s.n, s.c, s.inner, threads}];
  if (trials.calls >= kBatchNormBlockTrialCalls) {
    channels_per_block_ = trials.best_ms[1] < trials.best_ms[0] ? streaming : cache_sized;
    return;
  }
  const int candidate = trials.calls % 2;
  ++trials.calls;
  channels_per_block_ = candidate == 0 ? cache_sized : streaming;
  trial_best_ms_ = &trials.best_ms[candidate];
  start_ = std::chrono::steady_clock::now();
}

BatchNormBlockChoice::~BatchNormBlockChoice() {
  if (trial_best_ms_ == nullptr) return;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  *trial_best_ms_ = std::min(*trial_best_ms_, ms);
}

void SetBatchNormBlockSizeForTesting(BatchNormBlockSize size) { fixed_size.store(size); }

}  // namespace ddp
