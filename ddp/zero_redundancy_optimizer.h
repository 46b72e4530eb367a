// ZeroRedundancyOptimizer: ZeRO stage 1 (PyTorch's torch.distributed.optim.ZeroRedundancyOptimizer,
// llm.c's zero_stage=1). Each rank keeps optimizer state only for its shard of the parameters, steps
// that shard, and all-gathers the updated parameters; see Note [ZeRO-1].
//
//   auto ddp = DistributedDataParallel::Create(model, group, DdpOptions{});
//   ZeroOptions zero;  // Adam by default
//   auto opt = ZeroRedundancyOptimizer::Create((*ddp)->Parameters(), group, zero);
//   loss.Backward();                          // DDP averages the gradients
//   (*opt)->ClipGradNorm(1.0);                // optional: global norm over every rank's shard
//   DDP_RETURN_IF_ERROR((*opt)->TryStep());   // step my shard, all-gather the parameters
//   DDP_RETURN_IF_ERROR((*opt)->ConsolidateStateDict());  // before a checkpoint (collective)
//   checkpoint.optimizer = (*opt)->StateDict();          // rank 0: the unsharded "<index>.<field>" state
//
// Collectives: Create (none), TryStep, ClipGradNorm and ConsolidateStateDict communicate; every rank
// must call them in the same order. Thread safety: none (one training thread per rank).
#ifndef DDP_DDP_ZERO_REDUNDANCY_OPTIMIZER_H_
#define DDP_DDP_ZERO_REDUNDANCY_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "nn/adam.h"
#include "nn/optimizer.h"
#include "nn/sgd.h"
#include "tensor/tensor.h"

namespace ddp {

// Note [ZeRO-1]
// Layout. The parameters are split into groups (by default one group holding every parameter in order;
// DDP users may pass the Reducer's bucket_assignment() so that shards follow bucket boundaries). A
// group's parameters, concatenated, form a flat range of `numel` elements, padded to world * shard_numel
// with shard_numel = ceil(numel / world); rank r owns elements [r * shard_numel, (r + 1) * shard_numel)
// of every group. Every rank's shard of a group has the same padded size, so one all-gather per group
// (equal-sized pieces) rebuilds the parameters, and a reduce-scatter of a bucket buffer split W ways
// would land each rank's shard directly when the groups are the buckets.
//
// Update. Each rank holds one flat "shard parameter" per group (a copy of its range) and an inner
// SGD, Adam or AdamW over those flat tensors. All three update element by element with per-step
// scalars that only depend on the step count, so stepping the shard gives, element for element, the
// same floats as the unsharded optimizer given the same gradients (padding elements have zero gradient
// and stay zero). A step: copy my range of the (averaged) gradients and parameters into the shard
// tensors, step the inner optimizer, all-gather the shards, write every parameter back.
//
// Gradients. Either from DDP's all-reduce (every rank holds the averaged gradient and reads only its
// range), or from the reduce-scatter hook (ddp/zero_reduce_scatter_hook.h): when the groups are DDP's
// buckets, rank r's shard of a group is exactly piece r of the bucket buffer split W ways, so one
// reduce-scatter per bucket leaves each owner the average of its own range (1/W of the all-reduce's
// result; the rest of each rank's gradients stays local and unreduced). Clipping by global norm must not use the local gradient norm of a shard (llm.c's trap):
// ClipGradNorm sums the shards' squared norms with one all-reduce, then scales every shard.
//
// Bucket rebuild. With the all-reduce any layout is correct and the layout never changes. With the
// hook, shards must follow the buckets, which the Reducer rebuilds once after the first iteration. The
// hook reduce-scatters only buckets that equal one of the optimizer's groups and all-reduces any other
// (correct, just more traffic), and it records the buckets it saw. The next step, before reading
// gradients, compares them with the groups; when they differ it re-shards (Reshard: the state is
// all-gathered in the unsharded form and each rank keeps its piece of the new layout; collective and
// identical on every rank, because every rank has the same buckets). That step's gradients were
// all-reduced, so the new shards read correct averages; later steps reduce-scatter again.
//
// Checkpoints. ConsolidateStateDict all-gathers the shards' state and keeps it on one rank in the
// unsharded form (keys "<parameter index>.<field>" exactly as Sgd/Adam/AdamW write them), so a
// checkpoint looks like an unsharded optimizer's and can be resumed at any world size, by ZeRO or by
// the plain optimizer. LoadStateDict takes that unsharded state on every rank and keeps its shard.
// Memory: consolidation holds the whole state transiently (as torch's consolidate_state_dict does).

// Which element-wise optimizer runs on the shards.
enum class ZeroInnerOptimizer { kSgd, kAdam, kAdamW };

// "sgd", "adam", "adamw"; an error lists the valid names.
absl::StatusOr<ZeroInnerOptimizer> ParseZeroInnerOptimizer(const std::string& name);

struct ZeroOptions {
  ZeroInnerOptimizer optimizer = ZeroInnerOptimizer::kAdam;  // the update rule
  SgdOptions sgd;                                            // used with kSgd
  AdamOptions adam;                                          // used with kAdam and kAdamW
  // Parameter indices per group (Note [ZeRO-1]); every parameter exactly once. Empty (the default):
  // one group with every parameter in order.
  std::vector<std::vector<size_t>> groups;
};

// One group of the layout (Note [ZeRO-1]).
struct ZeroGroupLayout {
  std::vector<size_t> params;  // parameter indices in flat order
  int64_t numel = 0;           // their elements together
  int64_t shard_numel = 0;     // each rank's padded share: ceil(numel / world), at least 1
};

// A piece of one parameter inside a rank's shard of a group.
struct ZeroSegment {
  size_t param = 0;          // parameter index
  int64_t param_offset = 0;  // first element inside the parameter (flattened)
  int64_t shard_offset = 0;  // first element inside the rank's shard tensor
  int64_t length = 0;        // elements
};

// What a ZeroRedundancyOptimizer shares with its reduce-scatter hook (Note [ZeRO-1], Bucket rebuild).
struct ZeroHookShared {
  std::mutex mu;
  std::vector<ZeroGroupLayout> layout ABSL_GUARDED_BY(mu);        // the optimizer's current groups
  std::vector<std::vector<size_t>> observed ABSL_GUARDED_BY(mu);  // bucket parameter lists seen since the
                                                                  // last step, in launch order
  bool mismatched ABSL_GUARDED_BY(mu) = false;  // a bucket seen since the last step was not a group
};

// The layout for parameters of `param_numels` elements. `groups` as ZeroOptions::groups. An error names
// a parameter index that is out of range, repeated or missing, or a world size below 1. Pure.
absl::StatusOr<std::vector<ZeroGroupLayout>> ComputeZeroLayout(const std::vector<int64_t>& param_numels,
                                                               const std::vector<std::vector<size_t>>& groups,
                                                               int world_size);

// The pieces of parameters that rank `rank`'s shard of `group` holds, in shard order. Pure.
std::vector<ZeroSegment> ZeroShardSegments(const ZeroGroupLayout& group, const std::vector<int64_t>& param_numels,
                                           int rank);

// The optimizer (see the top of this file). It derives from Optimizer so that code holding an
// Optimizer& (lr schedules, ZeroGrad, params()) keeps working; its Step and StateDict differ as below.
class ZeroRedundancyOptimizer : public Optimizer {
 public:
  // Shards `params` over `group` (no communication: every rank must pass the same parameters in the
  // same order, with identical values, e.g. after DDP's broadcast). `group` is not owned and must
  // outlive the result. Errors: invalid options (naming the field) or groups (ComputeZeroLayout).
  // REQUIRES: params are float32 contiguous CPU tensors that require grad (checked).
  static absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> Create(std::vector<Tensor> params,
                                                                         ProcessGroup* group,
                                                                         const ZeroOptions& options);

  // TryStep, aborting with its message on error (like DistributedDataParallel::Forward).
  void Step() override;
  // Steps this rank's shard with the current gradients and all-gathers the updated parameters
  // (collective). Errors: a parameter without a gradient (named), a failed or timed-out collective.
  absl::Status TryStep();

  // torch.nn.utils.clip_grad_norm_ over every parameter's gradient, computed from the shards: each
  // rank's squared norm of its range, summed with one all-reduce, then each rank scales its range.
  // Returns the total norm before clipping. Collective. Call after backward, before TryStep. Only the
  // shard copies are scaled (the parameters' own gradients are left as they were).
  // REQUIRES: max_norm > 0.
  absl::StatusOr<double> ClipGradNorm(double max_norm);

  // Gathers every rank's state to rank `to` in the unsharded form (Note [ZeRO-1]); StateDict() on `to`
  // returns it until the next step. Collective.
  absl::Status ConsolidateStateDict(int to = 0);
  // On the rank that consolidated last, the unsharded state of the last ConsolidateStateDict (a deep
  // copy); elsewhere only the step count. REQUIRES: ConsolidateStateDict since the last step (checked)
  // when any state exists.
  OptimizerState StateDict() const override;
  // Loads an unsharded state (every rank passes the same one) and keeps this rank's shard. Errors name
  // the key that does not fit. No communication.
  absl::Status LoadStateDict(const OptimizerState& state) override;

  float lr() const override { return inner_->lr(); }
  void set_lr(float lr) override { inner_->set_lr(lr); }

  // Re-shards to `groups` (ZeroOptions::groups): the state is all-gathered in the unsharded form and
  // each rank keeps its piece of the new layout. Collective; every rank passes the same groups. Errors:
  // invalid groups (nothing changes), a failed collective. REQUIRES: not between ClipGradNorm and TryStep.
  absl::Status Reshard(const std::vector<std::vector<size_t>>& groups);

  // The state shared with a reduce-scatter hook (ddp/zero_reduce_scatter_hook.h); created on first use.
  // With a hook, every step first re-shards to the buckets the hook saw when they differ from the groups.
  std::shared_ptr<ZeroHookShared> hook_shared();

  // Bytes of optimizer state this rank holds (its shards' buffers), for the statistics.
  size_t state_bytes() const;
  const std::vector<ZeroGroupLayout>& layout() const { return layout_; }

 private:
  ZeroRedundancyOptimizer(std::vector<Tensor> params, ProcessGroup* group, std::vector<ZeroGroupLayout> layout,
                          const ZeroOptions& options);
  // Copies this rank's range of every gradient into the shard gradients (once per step).
  absl::Status LoadShardGradients();
  // Copies the shard of group `g` into the parameters from every rank (all-gather).
  absl::Status GatherParameters(size_t g);
  // The unsharded state on rank `to`, or on every rank when `to` < 0 (all-gathers; collective).
  absl::StatusOr<OptimizerState> GatherState(int to);
  // Installs `layout`: segments, shard tensors and a fresh inner optimizer (no state).
  void InstallLayout(std::vector<ZeroGroupLayout> layout);
  // With a hook: re-shards to the buckets it saw if they differ from the groups.
  absl::Status FollowHookBuckets();

  ProcessGroup* group_;
  ZeroOptions options_;  // groups: as at Create; lr: as at the last InstallLayout (see set_lr)
  std::shared_ptr<ZeroHookShared> hook_shared_;  // null until hook_shared()
  std::vector<ZeroGroupLayout> layout_;
  std::vector<int64_t> param_numels_;
  std::vector<std::vector<ZeroSegment>> segments_;  // per group: this rank's pieces
  std::vector<Tensor> shard_params_;                // per group: flat, shard_numel, with a gradient
  std::unique_ptr<Optimizer> inner_;                // over shard_params_
  bool shard_grads_loaded_ = false;                 // this step's gradients are in the shards
  std::optional<OptimizerState> consolidated_;      // on the consolidating rank, until the next step
  bool consolidated_current_ = false;               // ConsolidateStateDict since the last step
};

}  // namespace ddp

#endif  // DDP_DDP_ZERO_REDUNDANCY_OPTIMIZER_H_
