// What the Reducer tells those who watch it: gradients ready, buckets launched and done, iterations
// finished. Statistics (iteration_stats.h) and Chrome traces (trace.h) are observers; a program or a test
// can add its own (Reducer::AddObserver).
//
// Note [Reducer observers]
// The Reducer reads the clock only for its observers: with none attached it calls no timing function at
// all, so measuring costs nothing when nobody listens. Every event carries the times it needs, read once
// by the Reducer, so all observers of one Reducer see the same timestamps. Events arrive on the thread
// that runs PrepareForBackward and backward (Note [Reducer flow] in reducer.h), in this order per
// synchronised iteration: OnGradientReady and OnBucketLaunched interleaved while backward runs, then
// OnBucketDone for every bucket whose reduction was waited for, in bucket order, then OnIterationEnd. An
// iteration that fails (status() not OK) ends without OnBucketDone or OnIterationEnd.
#ifndef DDP_REDUCER_REDUCER_OBSERVER_H_
#define DDP_REDUCER_REDUCER_OBSERVER_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ddp {

// A parameter's gradient reached its bucket slot; with find_unused_parameters, also a parameter the
// forward pass did not use, whose slot was filled with zeros.
struct GradientReadyEvent {
  size_t param = 0;        // index into the Reducer's parameters (registration order)
  absl::string_view name;  // its dotted name; valid only during the call
  int64_t numel = 0;       // its element count
  bool used = true;        // false: unused this pass, zeros were written
  absl::Time at;           // when it became ready
};

// A bucket's reduction was handed to the communication hook.
struct BucketLaunchedEvent {
  int bucket = 0;    // launch index within the iteration
  size_t bytes = 0;  // bytes of the bucket's flat buffer
  absl::Time at;     // when it was launched
};

// A bucket's reduction finished (the Reducer waited for it after backward).
struct BucketDoneEvent {
  int bucket = 0;          // launch index within the iteration
  size_t bytes = 0;        // bytes of the bucket's flat buffer
  size_t params = 0;       // parameters in the bucket
  absl::string_view hook;  // CommHook::name() ("allreduce", "fp16", ...); valid only during the call
  absl::Time start, end;   // the communication interval, as the Work measured it (Work::StartTime/EndTime)
  int64_t bytes_sent = 0;  // bytes the hook handed to collectives for it (GradBucket::bytes_sent)
};

// A synchronised iteration finished: its gradients are averaged and in .grad.
struct IterationEndEvent {
  int64_t iteration = 0;      // synchronised iterations finished before this one
  int buckets = 0;            // buckets in the layout of this iteration
  absl::Time forward_start;   // as passed to PrepareForBackward
  absl::Time backward_start;  // PrepareForBackward finished (the end of DDP's forward)
  absl::Time backward_end;    // the backward pass finished (every gradient produced)
};

// Receives the Reducer's events (Note [Reducer observers]). Every method does nothing by default.
// Thread safety: called on the Reducer's training thread only; an observer shared between Reducers
// running on different threads must synchronise itself.
class ReducerObserver {
 public:
  virtual ~ReducerObserver() = default;
  virtual void OnGradientReady(const GradientReadyEvent& /*event*/) {}
  virtual void OnBucketLaunched(const BucketLaunchedEvent& /*event*/) {}
  virtual void OnBucketDone(const BucketDoneEvent& /*event*/) {}
  virtual void OnIterationEnd(const IterationEndEvent& /*event*/) {}
};

}  // namespace ddp

#endif  // DDP_REDUCER_REDUCER_OBSERVER_H_
