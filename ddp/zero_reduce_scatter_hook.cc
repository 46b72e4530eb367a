#include "ddp/zero_reduce_scatter_hook.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ddp {
namespace {

// The group whose parameters are exactly `bucket`'s, in order, or nullopt.
const ZeroGroupLayout* MatchingGroup(const std::vector<ZeroGroupLayout>& layout, const std::vector<size_t>& params) {
  for (const ZeroGroupLayout& g : layout) {
    if (g.params == params) return &g;
  }
  return nullptr;
}

}  // namespace

std::shared_ptr<Work> ZeroReduceScatterHook::RunHook(ProcessGroup& group, GradBucket& bucket) {
  std::vector<size_t> params;
  for (const GradBucketParameter& p : bucket.parameters) params.push_back(p.index);
  int64_t shard_numel = 0;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->observed.push_back(params);
    const ZeroGroupLayout* g = MatchingGroup(shared_->layout, params);
    if (g == nullptr) {
      shared_->mismatched = true;  // the optimizer re-shards before its next step (Note [ZeRO-1])
    } else {
      shard_numel = g->shard_numel;
    }
  }
  if (shard_numel == 0) return group.AllReduce(bucket.buffer);
  // Piece r of the bucket (padded with zeros to shard_numel) goes to rank r.
  const int world = group.size();
  const int64_t numel = bucket.buffer.numel();
  const float* buffer = bucket.buffer.data<float>();
  std::vector<Tensor> inputs;
  for (int r = 0; r < world; ++r) {
    Tensor piece = Tensor::Empty({shard_numel});
    float* out = piece.data<float>();
    const int64_t begin = std::min(numel, r * shard_numel), end = std::min(numel, (r + 1) * shard_numel);
    std::memcpy(out, buffer + begin, (end - begin) * sizeof(float));
    std::fill(out + (end - begin), out + shard_numel, 0.0f);
    inputs.push_back(piece);
  }
  Tensor received = Tensor::Empty({shard_numel});
  bucket.bytes_sent = static_cast<int64_t>(world * shard_numel * sizeof(float));
  std::shared_ptr<Work> scatter = group.ReduceScatter(received, inputs);
  Tensor target = bucket.buffer;  // the continuation writes this rank's averaged piece back
  const int64_t begin = std::min(numel, group.rank() * shard_numel);
  const int64_t length = std::min(numel, begin + shard_numel) - begin;
  HookContinuation write_back = [target, received, begin, length]() -> absl::StatusOr<std::shared_ptr<Work>> {
    std::memcpy(target.data<float>() + begin, received.data<float>(), length * sizeof(float));
    return std::shared_ptr<Work>(nullptr);
  };
  return ThenWork(absl::StrCat("ZeRO reduce-scatter of bucket ", bucket.index), scatter, {write_back});
}

std::shared_ptr<CommHook> MakeZeroReduceScatterHook(ZeroRedundancyOptimizer& zero) {
  return std::make_shared<ZeroReduceScatterHook>(zero.hook_shared());
}

}  // namespace ddp
