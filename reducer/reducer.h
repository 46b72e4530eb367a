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
//      and tell the observers (statistics, trace: Note [Reducer observers] in reducer_observer.h).
//   6. Note [Bucket rebuild]: the first synchronised iteration records the order in which gradients
//      became ready. At the next PrepareForBackward rank 0 broadcasts its order, every rank reassigns
//      buckets in that order (so buckets fill, and launch, as early as possible), and gradients move
//      into the new buffers. This happens once, unless rebuild_buckets is off (or Note [World size 1]).
//   Without find_unused_parameters, a parameter that got no gradient leaves its bucket unlaunched:
//   Finalize records an error naming those parameters (status(), and the next PrepareForBackward). With
//   it, Finalize marks such parameters unused then (an output the loss left out; Note [Gradients of
//   unused parameters] in reducer.cc) and launches their buckets.
//
// Note [Averaging in the collective]: step 3 divides every gradient by the world size so that the
// hook's sum is the average (PyTorch's DDP does the same). For a gradient that is a bucket view that
// division is a pass over the gradient of its own; for a copied one it rides along with the copy. When
// the group fuses kAvg's division into its reduction (ProcessGroup::FusesAverage: shm) and the hook is
// the plain AllReduceHook with the divisor at the group size, the Reducer instead leaves the gradients
// undivided (GradBucket::undivided) and the hook all-reduces with kAvg: the same values, with no pass
// of their own (bit-identical at world sizes that are powers of two, where (a + b) / 2 == a / 2 + b / 2
// barring overflow and subnormals; within a rounding elsewhere).
//
// Note [World size 1]: with one rank and the plain all-reduce hook the average of the gradients is the
// gradient itself. The iteration takes the same path as on many ranks (Note [Reducer iteration] in
// reducer.cc), minus the work that would change nothing: no copy into bucket slots, no launch, no
// used-map reduction, no write-back, and no bucket rebuild (there is no communication to start earlier).
// What remains is the bookkeeping that names parameters without a gradient, and the observers. A
// compression hook, or a reduce dtype other than float32, still runs at world size 1, so its rounding
// can be studied on one process (and one process rounds as each rank of many does).
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
#include "reducer/reducer_ablations.h"
#include "reducer/reducer_observer.h"
#include "reducer/trace.h"
#include "tensor/tensor.h"

namespace ddp {

// How the Reducer buckets and reduces. Every default is written here once; DdpOptions holds one.
struct ReducerOptions {
  BucketCaps caps;                       // bucket sizes (Note [Bucket assignment])
  bool gradient_as_bucket_view = false;  // .grad tensors are views into the bucket buffers (no copy back)
  bool find_unused_parameters = false;   // search the graph from every output for parameters without
                                         // gradient every forward; parameters the search reached but
                                         // the loss did not are found unused at the end of backward
  bool static_graph = false;             // the graph is the same every iteration (PyTorch's static_graph):
                                         // the unused search and the used-map all-reduce run in the first
                                         // synchronised iteration only; later ones reuse their result
  bool rebuild_buckets = true;           // rebuild once in observed gradient order (Note [Bucket rebuild])
  std::shared_ptr<CommHook> comm_hook;   // how buckets are reduced; null: AllReduceHook. With a
                                         // reduce_dtype other than float32 the hook gets buckets of that
                                         // dtype (the built-in compression and PowerSGD hooks take float32:
                                         // DistributedDataParallel refuses those combinations)
  DType reduce_dtype = DType::kFloat32;  // dtype of the bucket buffers, i.e. of the all-reduce: float32 or
                                         // bfloat16 (half the bytes; rounding: Note [Reduce dtype rounding]
                                         // in reducer/bucket_cast.h). DDP sets it from
                                         // DdpOptions::mixed_precision. bfloat16 takes CPU or CUDA
                                         // parameters and needs gradient_as_bucket_view off (a float32
                                         // .grad cannot view it)
  bool record_stats = true;              // keep IterationStats of every iteration (stats())
  bool record_trace = false;             // keep Chrome trace events (trace())
  internal::ReducerAblations ablations;  // benchmarks and tests only (reducer/reducer_ablations.h)
};

// Averages the gradients of a module's parameters across the ranks of a process group while backward
// runs (Note [Reducer flow]); DistributedDataParallel owns one. Not thread-safe (see the top of this file).
class Reducer {
 public:
  // `params` are the module's parameters in registration order with their dotted `names`; `group` is not
  // owned and must outlive the Reducer. Registers one post-accumulate-grad hook per parameter.
  // REQUIRES: params are float32 leaves that require grad, all on one device type;
  // names.size() == params.size(); options.reduce_dtype is float32, or bfloat16 with
  // gradient_as_bucket_view off (CheckReduceDtype in reducer/bucket_cast.h; DDP returns these as errors).
  Reducer(std::vector<Tensor> params, std::vector<std::string> names, ProcessGroup* group, ReducerOptions options);
  // Removes the hooks. REQUIRES: no backward pass running.
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Arms the hooks for the next backward pass (Note [Reducer flow] step 2). `forward_start` is when the
  // forward began (statistics; any value when !observed()). Collective when a bucket rebuild is due (the
  // first call after the first synchronised iteration broadcasts rank 0's gradient order), and the
  // backward pass it arms is collective (bucket reductions): every rank must arm the same passes.
  // Returns the error of the previous iteration, if any (unused parameters without
  // find_unused_parameters, a failed or timed-out collective): then the Reducer stays unusable.
  absl::Status PrepareForBackward(const std::vector<Tensor>& outputs, absl::Time forward_start);
  // Disarms the hooks for the next backward pass: gradients accumulate locally (DDP's no_sync()).
  // REQUIRES: not inside a backward pass.
  void SkipNextSync();
  // Join (ddp/join.h): this rank has run out of data and stands in for a synchronised backward pass of
  // the ranks still training. Every parameter is marked ready with a zero gradient (and unused, under
  // find_unused_parameters), so every bucket is reduced with zeros in this rank's place and the used map
  // too; the averaged gradients are written back as after a real backward. Collective, like the pass it
  // shadows. Returns the iteration's error. REQUIRES: armed by PrepareForBackward, no backward running.
  absl::Status ShadowBackward();
  // What gradients are divided by before they are summed across ranks (default: the group's size, so the
  // sum is the average). Join sets it to the number of ranks still training when
  // divide_by_initial_world_size is off. REQUIRES: divisor > 0; not inside a backward pass.
  void SetGradientDivisor(int divisor);
  // Replaces the communication hook (DistributedDataParallel::RegisterCommHook). null: AllReduceHook.
  // REQUIRES: no backward pass has been armed yet (the hook sees every iteration from the first).
  void SetCommHook(std::shared_ptr<CommHook> hook);
  // The communication hook in use (never null).
  const CommHook& comm_hook() const { return *options_.comm_hook; }

  // The first error seen (OK when none). Finalize runs inside backward and cannot return one: check it
  // after backward. The next PrepareForBackward returns it too.
  const absl::Status& status() const { return status_; }

  // Adds an observer of every later iteration (Note [Reducer observers]). Not owned: it must outlive the
  // Reducer. REQUIRES: observer != nullptr; not inside a backward pass.
  void AddObserver(ReducerObserver* observer);
  // Whether any observer listens (statistics, trace, AddObserver). When false the Reducer reads no clock.
  bool observed() const { return !observers_.empty(); }

  // The current bucket layout, one line per bucket (bucket_assignment.h: DescribeBuckets).
  std::string DescribeBuckets() const;
  // The current buckets as parameter indices, in launch order.
  const std::vector<std::vector<size_t>>& bucket_assignment() const { return assignment_; }
  // Statistics of every synchronised iteration so far (empty unless options.record_stats).
  const std::vector<IterationStats>& stats() const { return stats_.history(); }
  // Trace events (empty unless options.record_trace).
  const TraceRecorder& trace() const { return trace_; }
  // Whether the buckets follow an observed gradient order (rebuilt, or restored by RestoreBucketOrder).
  bool buckets_rebuilt() const { return rebuild_ == Rebuild::kDone; }

  // The gradient order the rebuilt buckets follow, as comma-separated parameter indices: after the
  // rebuild, the order used; after the first synchronised iteration but before the rebuild (which the
  // next PrepareForBackward does), the order it will use on rank 0 (the rank that saves checkpoints);
  // "" before that, with rebuild_buckets off, or at Note [World size 1]. Checkpoints keep it: with more
  // than two ranks the sum's rounding depends on where bucket boundaries fall (Gloo's ring splits each
  // bucket into per-rank chunks), so a resumed run reduces bit-identically only in the same buckets.
  std::string RebuiltOrderText() const;
  // Builds the buckets in a saved RebuiltOrderText() order now and skips the first-iteration rebuild
  // (every rank must restore the same order). "" changes nothing. Errors (kDataLoss) name a malformed
  // order. REQUIRES: no backward pass has run yet.
  absl::Status RestoreBucketOrder(absl::string_view order_text);
  // Rebuilds the buckets under new `caps` between iterations (--bucket_cap_mb=auto, train/
  // auto_bucket_caps.h): in the rebuilt gradient order when the buckets follow one, otherwise in reverse
  // registration order (and a pending rebuild then uses the new caps). Gradients that are bucket views move
  // into the new buffers with their values. Not collective: the caller makes every rank pass the same caps
  // (e.g. rank 0's, broadcast), or the ranks' buckets would not match. A hook that keeps state per bucket
  // index (PowerSGD) sees different buckets afterwards. REQUIRES: not armed and no backward pass running.
  void Rebucket(const BucketCaps& caps);
  // The caps the current buckets were built with.
  const BucketCaps& caps() const { return options_.caps; }

 private:
  friend void internal::SetReducerAblations(Reducer& reducer, const internal::ReducerAblations& ablations);

  // Where the current iteration stands (Note [Reducer iteration] in reducer.cc).
  enum class Phase {
    kIdle,        // not armed: hooks only note which parameters got a gradient
    kArmed,       // PrepareForBackward ran; the first hook starts the pass
    kBackward,    // hooks fill slots, full buckets launch in order; Finalize is queued
    kFinalizing,  // Finalize: delayed launches, waits, write-back, observers
  };
  // The one-time bucket rebuild (Note [Bucket rebuild]).
  enum class Rebuild {
    kOff,        // rebuild_buckets off, Note [World size 1], or a rebuild failed
    kRecording,  // the first synchronised iteration records the gradient ready order
    kPending,    // recorded: the next PrepareForBackward rebuilds
    kDone,       // the buckets follow an observed order
  };
  struct Bucket {
    std::vector<size_t> params;               // indices into params_, in slot order
    Tensor buffer;                            // flat
    std::vector<GradBucketParameter> layout;  // what the comm hook sees of each parameter (GradBucket)
  };
  struct Slot {
    size_t bucket = 0;
    Tensor view;  // the parameter's region of the bucket buffer, shaped like the parameter
  };
  // Everything that lives for one synchronised iteration; PrepareForBackward resets it.
  struct Iteration {
    std::vector<bool> ready;                   // per parameter: its gradient is final (and in its slot)
    std::vector<bool> unused;                  // per parameter: find_unused_parameters found no path to it
    std::vector<size_t> pending;               // per bucket: parameters not yet ready
    std::vector<std::shared_ptr<Work>> works;  // per bucket: its reduction, null until launched
    std::vector<int64_t> bytes_sent;           // per bucket: what its hook put on the wire (GradBucket)
    size_t next_bucket = 0;                    // buckets before it are launched
    // Read only when observed() (Note [Reducer observers]).
    absl::Time forward_start, backward_start, backward_end;
  };

  void BuildBuckets(const std::vector<std::vector<size_t>>& assignment);
  void BuildBucketsInOrder(const std::vector<size_t>& order);
  absl::Status RebuildBuckets();
  void StartIteration(absl::Time forward_start);
  void OnGradientReady(size_t index);
  void BeginBackward();
  // What a parameter puts into its bucket slot when it is marked ready (Note [Gradients of unused
  // parameters] in reducer.cc).
  enum class Contribution {
    kGradient,      // its hook fired: .grad, with this pass's gradient accumulated into it
    kHeldGradient,  // no gradient this pass (find_unused_parameters): whatever .grad already holds (e.g.
                    // accumulated under no_sync), zeros when it holds none
    kZeros,         // Join's shadow pass: zeros, whatever .grad holds
  };
  void MarkReady(size_t index, Contribution contribution);
  void CopyIntoSlot(size_t index, Contribution contribution);
  void MarkUnreachedUnused();
  void LaunchReadyBuckets();
  void LaunchBucket(size_t bucket);
  // Sets averages_in_collective_ from the group, the divisor and the hook; called wherever the last two
  // change (they change only outside a backward pass).
  void UpdateAveraging();
  void Finalize();
  absl::Status FinishIteration();
  absl::Status UnreadyParametersError() const;
  absl::Status WaitForBuckets();
  absl::Status ReduceUsedMap(std::vector<bool>* globally_used);
  void WriteBackGradients(const std::vector<bool>& globally_used);
  void NotifyIterationEnd();
  template <typename Event>
  void Notify(void (ReducerObserver::*method)(const Event&), const Event& event);

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::vector<int> hook_ids_;
  ProcessGroup* group_;
  ReducerOptions options_;
  bool reduces_;  // buckets go through the comm hook; false at Note [World size 1]
  int gradient_divisor_;  // gradients are scaled by 1/gradient_divisor_ into the buckets (the group size),
                          // or averaged by the collective (Note [Averaging in the collective])
  // Buckets go to the hook undivided, to be averaged by the collective (Note [Averaging in the collective]);
  // kept by UpdateAveraging so the per-gradient hook path makes no virtual call or cast.
  bool averages_in_collective_ = false;
  std::vector<BucketParameter> specs_;
  std::vector<std::vector<size_t>> assignment_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;

  Phase phase_ = Phase::kIdle;
  Iteration iteration_;
  std::vector<bool> locally_used_;  // got a gradient since the last synchronised iteration (no_sync too)
  int64_t finished_iterations_ = 0;  // synchronised iterations that ended OK
  // static_graph with find_unused_parameters: the first synchronised iteration's unused set (this rank)
  // and globally-used map, reused by every later one; recorded once it finished OK.
  bool static_recorded_ = false;
  std::vector<bool> static_unused_;
  std::vector<bool> static_globally_used_;

  Rebuild rebuild_ = Rebuild::kOff;
  std::vector<size_t> ready_order_;    // kRecording: the order gradients became ready
  std::vector<size_t> rebuilt_order_;  // kDone: the order the current buckets were built in

  absl::Status status_;
  std::vector<ReducerObserver*> observers_;  // not owned; stats_ and trace_ when the options ask
  IterationStatsRecorder stats_;
  TraceRecorder trace_;
};

}  // namespace ddp

#endif  // DDP_REDUCER_REDUCER_H_
