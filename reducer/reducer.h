// Reducer: averages gradients across ranks while backward is still running. START HERE for reducer/.
//
// Note [Reducer flow]
//   1. At construction parameters are assigned to buckets (Note [Bucket assignment]); each bucket owns
//      one flat buffer, and each parameter a view of it. One post-accumulate-grad hook per parameter
//      is registered (tensor/autograd.h, Note [Backward firing order]).
//   2. DDP calls PrepareForBackward(outputs) after every forward that must synchronise. With
//      find_unused_parameters it walks the graph from the outputs to find parameters that will get no
//      gradient.
//   3. When a parameter's gradient is final its hook copies it, divided by the world size, into its
//      bucket slot (with gradient_as_bucket_view the gradient already lives there and is only scaled).
//      On the first hook of a pass the unused parameters are marked ready with zeros and the
//      "backward finished" callback is queued.
//   4. A bucket whose parameters are all ready is launched through the communication hook at once,
//      strictly in bucket index order: a full bucket waits until every earlier bucket was launched. The
//      host never waits for communication here.
//   5. Backward-finished callback (Finalize): wait for every bucket's Work (host-blocking on CPU; on a
//      device, WaitStream: the compute stream waits for the communication stream), all-reduce the used-map
//      (find_unused_parameters), write averaged gradients back into .grad (unless they are bucket views),
//      record statistics and trace events.
//   6. Note [Bucket rebuild]: the first synchronised iteration records the order in which gradients
//      became ready. At the next PrepareForBackward rank 0 broadcasts its order, every rank reassigns
//      buckets in that order (so buckets fill, and launch, as early as possible), and gradients move
//      into the new buffers. This happens once, unless rebuild_buckets is off.
//   Without find_unused_parameters, a parameter that got no gradient leaves its bucket unlaunched; the
//   next PrepareForBackward fails with an error naming those parameters.
//
// Note [World size 1]: with one rank and the plain all-reduce hook the average of the gradients is the
// gradient itself, so the Reducer copies and communicates nothing; it only tracks which parameters got a
// gradient (so the unused-parameter error still fires) and records statistics. A compression hook is
// still applied at world size 1, so its rounding can be studied on one process.
//
// Thread safety: not thread-safe. One training thread calls PrepareForBackward and runs backward (hooks
// and Finalize run on the thread running backward); the process group runs communication elsewhere.
#ifndef DDP_REDUCER_REDUCER_H_
#define DDP_REDUCER_REDUCER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/process_group.h"
#include "reducer/bucket_assignment.h"
#include "reducer/comm_hook.h"
#include "reducer/iteration_stats.h"
#include "reducer/trace.h"
#include "tensor/tensor.h"

namespace ddp {

struct ReducerOptions {
  size_t first_bucket_cap_bytes = size_t{1} << 20;  // 1 MiB: the first bucket launches early
  size_t bucket_cap_bytes = size_t{25} << 20;       // 25 MiB; 0 means one bucket per parameter
  bool gradient_as_bucket_view = false;             // .grad tensors are views into bucket buffers
  bool find_unused_parameters = false;              // search the graph for parameters without gradient
  bool rebuild_buckets = true;                      // Note [Bucket rebuild]
  std::shared_ptr<CommHook> comm_hook;              // null: AllReduceHook
  bool record_trace = false;                        // keep Chrome trace events (trace())
  bool delay_reduction = false;                     // ablation: launch every bucket only after backward
};

class Reducer {
 public:
  // `params` are the module's parameters in registration order with their dotted `names`; `group` is not
  // owned and must outlive the Reducer. REQUIRES: params are float32 leaves that require grad, all on
  // one device type; names.size() == params.size().
  Reducer(std::vector<Tensor> params, std::vector<std::string> names, ProcessGroup* group, ReducerOptions options);
  // Removes the hooks. REQUIRES: no backward pass running.
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Arms the hooks for the next backward pass (Note [Reducer flow] step 2). Returns the error of the
  // previous iteration, if any (unused parameters without find_unused_parameters, a failed or timed
  // out collective): then the Reducer stays unusable. `forward_start` is when forward began (stats).
  absl::Status PrepareForBackward(const std::vector<Tensor>& outputs, absl::Time forward_start);
  // Disarms the hooks for the next backward pass: gradients accumulate locally (DDP's no_sync()).
  void SkipNextSync() { expect_hooks_ = false; }

  // The first error seen (OK when none). Check it after backward: a failed collective cannot be
  // reported from inside the backward pass.
  const absl::Status& status() const { return status_; }

  // The current bucket layout, one line per bucket (bucket_assignment.h: DescribeBuckets).
  std::string DescribeBuckets() const;
  // The current buckets as parameter indices, in launch order.
  const std::vector<std::vector<size_t>>& bucket_assignment() const { return assignment_; }
  // Statistics of every synchronised iteration so far.
  const std::vector<IterationStats>& stats() const { return stats_; }
  // Trace events (empty unless options.record_trace).
  const TraceRecorder& trace() const { return trace_; }
  TraceRecorder& mutable_trace() { return trace_; }
  bool buckets_rebuilt() const { return rebuilt_; }

  // The gradient order the rebuilt buckets follow, as comma-separated parameter indices: after the
  // rebuild, the order used; after the first synchronised iteration but before the rebuild (which the
  // next PrepareForBackward does), the order it will use on rank 0 (the rank that saves checkpoints);
  // "" before that or with rebuild_buckets off. Checkpoints keep it: with more than two ranks the sum's
  // rounding depends on where bucket boundaries fall (Gloo's ring splits each bucket into per-rank
  // chunks), so a resumed run reduces bit-identically only in the same buckets.
  std::string RebuiltOrderText() const;
  // Builds the buckets in a saved RebuiltOrderText() order now and skips the first-iteration rebuild
  // (every rank must restore the same order). "" changes nothing. Errors (kDataLoss) name a malformed
  // order. REQUIRES: no backward pass has run yet.
  absl::Status RestoreBucketOrder(absl::string_view order_text);

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_, in slot order
    Tensor buffer;               // flat
    size_t pending = 0;          // parameters not yet ready this iteration
    std::shared_ptr<Work> work;  // this iteration's reduction (null until launched)
    absl::Time launch_time;
  };
  struct Slot {
    size_t bucket = 0;
    Tensor view;  // the parameter's region of the bucket buffer, shaped like the parameter
  };

  void BuildBuckets(const std::vector<std::vector<size_t>>& assignment);
  absl::Status RebuildBuckets();
  // A gradient order from text, completed with the parameters it lacks (reverse registration order).
  absl::StatusOr<std::vector<size_t>> ParseGradientOrder(absl::string_view order_text) const;
  void BuildBucketsInOrder(const std::vector<size_t>& order);
  void OnGradientReady(size_t index);
  void MarkReady(size_t index, bool used);
  void LaunchReadyBuckets();
  void Finalize();
  void FinalizePassthrough();
  absl::Status WaitForBuckets();
  absl::Status ReduceUsedMap(std::vector<bool>* globally_used);
  void WriteBackGradients(const std::vector<bool>& globally_used);
  void RecordIteration(absl::Time backward_end);
  std::string UnreadyParameterNames() const;

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::vector<int> hook_ids_;
  ProcessGroup* group_;
  ReducerOptions options_;
  std::vector<BucketParameter> specs_;
  std::vector<std::vector<size_t>> assignment_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;
  bool passthrough_ = false;  // Note [World size 1]

  // Per-iteration state.
  bool expect_hooks_ = false;
  bool callback_queued_ = false;
  bool finalizing_ = false;  // Finalize is running (the delay_reduction ablation launches then)
  std::vector<bool> ready_;
  std::vector<bool> locally_used_;
  std::vector<bool> unused_this_pass_;
  size_t next_bucket_ = 0;
  absl::Time forward_start_, backward_start_;

  // Bucket rebuild.
  std::vector<size_t> ready_order_;
  std::vector<size_t> rebuilt_order_;  // the order the current buckets were built in (empty: initial)
  bool rebuilt_ = false;
  bool rebuild_pending_ = false;

  absl::Status status_;
  std::vector<IterationStats> stats_;
  TraceRecorder trace_;
};

}  // namespace ddp

#endif  // DDP_REDUCER_REDUCER_H_
