// DistributedDataParallel: wraps a module so that every rank trains an identical copy and gradients are
// averaged across ranks during backward. START HERE for ddp/. Used like the plain module:
//
//   auto ddp = DistributedDataParallel::Create(model, context->group.get(), DdpOptions{});
//   Tensor loss = CrossEntropy((*ddp)->Forward(x), y);  // collective in training mode
//   loss.Backward();                      // buckets are all-reduced while backward runs
//   if (!(*ddp)->status().ok()) ...       // a failed collective is reported here
//   optimizer.Step();
//
// At wrap time it checks that every rank has the same parameter names, shapes and dtypes (the error
// names the first differing parameter and the ranks) and the same DDP settings: world size, bucket caps
// and the resulting bucket layout (count, dtype and device per bucket), comm hook, reduce dtype,
// find_unused_parameters, gradient_as_bucket_view, rebuild_buckets and buffer broadcasting (the error names the setting and its
// value on each rank, Note [DDP settings agreement]); then it broadcasts every parameter and buffer from
// rank 0 in coalesced chunks and builds a Reducer (reducer/reducer.h, Note [Reducer flow]).
//
// A module with several inputs or outputs (Note [Modules with several inputs and outputs] in
// nn/module.h) is wrapped the same way and called through ForwardMany:
//
//   TensorList out = (*ddp)->ForwardMany({{"image", x}, {"side", s}});
//   Tensor loss = CrossEntropy(out.Get("logits"), y) + CrossEntropy(out.Get("aux"), z) * 0.3f;
//
// With find_unused_parameters the autograd graphs of all its defined outputs are searched, as PyTorch's
// DDP searches every tensor in the structure forward returned; an output the loss leaves out on a step
// is allowed too (Note [Gradients of unused parameters] in reducer/reducer.cc).
//
// Collectives: Create, every training-mode Forward (buffer broadcast; once, the bucket rebuild's
// broadcast of rank 0's gradient order, Note [Bucket rebuild]) and every synchronised backward (bucket
// reductions) communicate, so every rank must make the same calls in the same order, with NoSync around
// the same passes.
//
// Uneven inputs (ranks with different numbers of batches): wrap the training loop in a Join
// (ddp/join.h, Note [Join]); inside it every training forward also all-reduces a small "still training"
// vector.
//
// Errors: the gradient reduction finishes in a callback at the end of backward (Reducer::Finalize), which
// cannot return a Status. Its errors (a parameter without gradient, a failed or timed-out collective) are
// kept: status() shows them right after backward, and the next TryForward returns them (Forward aborts).
#ifndef DDP_DDP_DISTRIBUTED_DATA_PARALLEL_H_
#define DDP_DDP_DISTRIBUTED_DATA_PARALLEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "ddp/ddp_ablations.h"
#include "ddp/mixed_precision.h"
#include "nn/module.h"
#include "reducer/reducer.h"

namespace ddp {

// The name under which checkpoints keep Reducer::RebuiltOrderText() (checkpoint/checkpoint.h:
// Checkpoint::extra_state), for RestoreBucketOrder on resume.
inline constexpr char kBucketOrderStateName[] = "ddp_bucket_order";

class Join;  // ddp/join.h

// How DDP wraps a module. Every default is written once, here or in ReducerOptions and BucketCaps.
struct DdpOptions {
  ReducerOptions reducer;                            // buckets, comm hook, unused search, stats, trace
  bool broadcast_buffers = true;                     // rank 0's buffers before every training forward
  size_t broadcast_chunk_bytes = size_t{250} << 20;  // coalescing limit of wrap-time and buffer broadcasts
  DdpMixedPrecision mixed_precision;                 // all float32; reduce_dtype bfloat16 halves the
                                                     // all-reduce (ddp/mixed_precision.h)
};

// A Module whose only child is the wrapped module, registered as "module" (state dict names are
// "module.fc1.weight", as in PyTorch). Not thread-safe: one training thread.
class DistributedDataParallel : public Module {
 public:
  // Verifies the models across ranks, broadcasts rank 0's parameters and buffers, builds the Reducer.
  // Collective: every rank of `group` must call it. `group` is not owned and must outlive the result.
  // Errors (kInvalidArgument, before any communication) name a mixed_precision setting that is not
  // supported or does not combine with the other options (CheckDdpMixedPrecision).
  static absl::StatusOr<std::shared_ptr<DistributedDataParallel>> Create(std::shared_ptr<Module> module,
                                                                          ProcessGroup* group,
                                                                          DdpOptions options = {});

  // Broadcasts buffers (training, broadcast_buffers), runs the module, and arms the Reducer for the
  // backward pass (training with grad mode on, unless inside NoSync). Collective in training mode (see
  // the top of this file). Aborts with the error message if the previous iteration failed or a
  // broadcast fails; TryForward returns it as a Status instead.
  Tensor Forward(const Tensor& x) override;
  // Forward, with the previous iteration's error (status()) or a failed broadcast as the Status.
  absl::StatusOr<Tensor> TryForward(const Tensor& x);
  // Forward for a module with several inputs or outputs: the same steps around module().ForwardMany
  // (which for a one-tensor module is {Forward(inputs[0])}). Under find_unused_parameters the Reducer
  // searches every defined output's graph; undefined outputs (optional ones not computed) are skipped.
  // Collective as Forward. Aborts as Forward; TryForwardMany returns the error instead.
  TensorList ForwardMany(const TensorList& inputs) override;
  absl::StatusOr<TensorList> TryForwardMany(const TensorList& inputs);

  // DDP modules are not replicated (DataParallel replicates the inner module). Aborts.
  std::shared_ptr<Module> Replicate() const override;

  // While the returned guard lives, backward passes accumulate gradients locally without communication
  // (PyTorch's no_sync()); the first backward after it synchronises the accumulated gradients. The guard
  // must not outlive this DDP module.
  class NoSyncGuard {
   public:
    // Prefer NoSync(). `ddp` is not owned.
    explicit NoSyncGuard(DistributedDataParallel* ddp) : ddp_(ddp) { ddp_->require_sync_ = false; }
    ~NoSyncGuard() { ddp_->require_sync_ = true; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel* ddp_;
  };
  NoSyncGuard NoSync() { return NoSyncGuard(this); }

  // OK, or the first error of the Reducer (unused parameters, failed or timed-out collective); check it
  // after every backward pass (see Errors at the top of this file).
  const absl::Status& status() const { return reducer_->status(); }
  // The wrapped module (shared ownership with whoever passed it to Create).
  Module& module() const { return *module_; }
  // The Reducer: bucket layout, statistics, trace, rebuilt order. Lives as long as this DDP module.
  const Reducer& reducer() const { return *reducer_; }
  // Resuming: rebuilds the buckets in a checkpoint's Reducer::RebuiltOrderText() (see there; checkpoints
  // keep it as the extra state named kBucketOrderStateName). Every rank passes the same text.
  // REQUIRES: before the first backward pass.
  absl::Status RestoreBucketOrder(absl::string_view order_text) { return reducer_->RestoreBucketOrder(order_text); }
  // The process group passed to Create.
  ProcessGroup& group() const { return *group_; }
  // Reducer::Rebucket: new bucket caps between iterations (--bucket_cap_mb=auto, train/
  // auto_bucket_caps.h). Not collective: every rank must pass the same caps (the caller agrees them first).
  // REQUIRES: between iterations (no forward armed a backward that has not run).
  void Rebucket(const BucketCaps& caps) { reducer_->Rebucket(caps); }
  // Reducer::AddObserver: `observer` (not owned, must outlive this module) sees every later iteration.
  void AddReducerObserver(ReducerObserver* observer) { reducer_->AddObserver(observer); }
  // Replaces how buckets are reduced (PyTorch's register_comm_hook; reducer/comm_hook.h). The hook object
  // owns its state. Collective: every rank must register a hook of the same name() (part of Note [DDP
  // settings agreement]; the error names each rank's hook). null: back to the plain all-reduce. Errors
  // (kFailedPrecondition) if a forward pass already ran: the hook must see every iteration; errors
  // (kInvalidArgument) if the hook does not take buckets of mixed_precision.reduce_dtype.
  absl::Status RegisterCommHook(std::shared_ptr<CommHook> hook);

 private:
  DistributedDataParallel(std::shared_ptr<Module> module, ProcessGroup* group, DdpOptions options);
  absl::Status BroadcastBuffers();
  // The steps of a forward before the module runs (Join, buffer broadcast); `start` gets the forward's
  // start time for the statistics. Then, after it ran, the Reducer is armed with its `outputs`.
  absl::Status BeforeModuleForward(absl::Time* start);
  absl::Status AfterModuleForward(const std::vector<Tensor>& outputs, absl::Time start);

  std::shared_ptr<Module> module_;
  ProcessGroup* group_;
  DdpOptions options_;
  std::unique_ptr<Reducer> reducer_;
  bool require_sync_ = true;
  bool forward_ran_ = false;  // RegisterCommHook is refused after the first forward
  Join* join_ = nullptr;  // the active Join (ddp/join.h), which announces this rank in training forwards
  friend class Join;
  friend void internal::SetDdpAblations(DistributedDataParallel& ddp, const internal::ReducerAblations& ablations);
};

// Checks that every rank's model has the same parameter and buffer names, shapes and dtypes
// (collective). The error names the first differing entry, rank 0's version and the differing rank's.
absl::Status VerifyModelsMatch(const Module& module, ProcessGroup& group);

// Broadcasts `tensors` from `root` in place, packed by dtype into flat chunks of at most `chunk_bytes`
// (one collective per chunk instead of one per tensor). Collective.
absl::Status BroadcastCoalesced(const std::vector<Tensor>& tensors, ProcessGroup& group, int root,
                                size_t chunk_bytes);

}  // namespace ddp

#endif  // DDP_DDP_DISTRIBUTED_DATA_PARALLEL_H_
