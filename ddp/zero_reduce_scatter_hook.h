// The reduce-scatter communication hook of ZeRO-1 (Note [ZeRO-1] in ddp/zero_redundancy_optimizer.h):
// each bucket that equals one of the optimizer's groups is reduce-scattered, so rank r receives only the
// average of its own piece (1/W of the bucket) instead of the whole average; any other bucket (before
// the optimizer re-shards to rebuilt buckets) is all-reduced.
//
//   auto ddp = DistributedDataParallel::Create(model, group, options);
//   ZeroOptions zero_options;
//   zero_options.groups = (*ddp)->reducer().bucket_assignment();  // shards follow the buckets
//   auto zero = ZeroRedundancyOptimizer::Create((*ddp)->Parameters(), group, zero_options);
//   DDP_RETURN_IF_ERROR((*ddp)->RegisterCommHook(MakeZeroReduceScatterHook(**zero)));  // before Forward
//
// After a reduce-scatter, the parameters' gradients outside this rank's shard hold this rank's own
// (unreduced) contribution: only the optimizer reads them (its ClipGradNorm sums the shards' norms).
// Anything else that reads gradients (nn's ClipGradNorm, a gradient dump) must not be used with it.
#ifndef DDP_DDP_ZERO_REDUCE_SCATTER_HOOK_H_
#define DDP_DDP_ZERO_REDUCE_SCATTER_HOOK_H_

#include <memory>
#include <string>

#include "ddp/zero_redundancy_optimizer.h"
#include "reducer/comm_hook.h"

namespace ddp {

// The hook. Thread safety: RunHook may run on any thread (it locks the shared state); the Work's
// continuation copies the received piece into the bucket buffer.
class ZeroReduceScatterHook : public CommHook {
 public:
  // `shared`: ZeroRedundancyOptimizer::hook_shared() of the optimizer that reads the gradients.
  // REQUIRES: the optimizer's parameters are DDP's Parameters() in order (bucket indices refer to them).
  explicit ZeroReduceScatterHook(std::shared_ptr<ZeroHookShared> shared) : shared_(std::move(shared)) {}
  std::shared_ptr<Work> RunHook(ProcessGroup& group, GradBucket& bucket) override;
  std::string name() const override { return "zero_reduce_scatter"; }

 private:
  std::shared_ptr<ZeroHookShared> shared_;
};

// The hook for `zero` (shares its state; the optimizer may be destroyed first).
std::shared_ptr<CommHook> MakeZeroReduceScatterHook(ZeroRedundancyOptimizer& zero);

}  // namespace ddp

#endif  // DDP_DDP_ZERO_REDUCE_SCATTER_HOOK_H_
