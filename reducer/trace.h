// Chrome trace events (chrome://tracing, Perfetto) of DDP iterations: forward, backward, gradient
// ready instants (with the parameter's "numel", which ddp_sim profile reads), bucket launches and all-reduce
// spans, and the exposed part of the communication (what ran after backward's compute ended, which the step
// waits for: the stats table's "exposed"), one process per rank with four tracks: compute, communication,
// exposed communication, and modules (the per-module forward/backward slices of ddp/module_trace.h, on the
// same clock). The recorder is a Reducer observer (Note [Reducer observers] in reducer_observer.h).
#ifndef DDP_REDUCER_TRACE_H_
#define DDP_REDUCER_TRACE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "reducer/reducer_observer.h"

namespace ddp {

class ProcessGroup;

// Collects the events of one rank: the Reducer's (as an observer; the Reducer attaches one when
// ReducerOptions::record_trace is on) and any added with Span and Instant. Not thread-safe (the training
// thread records).
class TraceRecorder : public ReducerObserver {
 public:
  // Thread (track) ids within a rank's process track.
  static constexpr int kComputeTrack = 0;
  static constexpr int kCommTrack = 1;
  static constexpr int kExposedTrack = 2;
  static constexpr int kModuleTrack = 3;  // "forward <module path>" / "backward <module path>" slices

  // `rank` names this recorder's process track.
  explicit TraceRecorder(int rank) : rank_(rank) {}
  // The rank given to the constructor.
  int rank() const { return rank_; }

  // Reducer events: "grad ready: <name>" and "launch bucket <b>" instants on the compute track;
  // "bucket <b> <hook>" spans on the communication track; "forward" and "backward" spans per iteration;
  // "exposed communication" spans on the exposed track: the union of the iteration's bucket spans after
  // backward_end (the same quantity as IterationStats::exposed_comm_s).
  void OnGradientReady(const GradientReadyEvent& event) override;
  void OnBucketLaunched(const BucketLaunchedEvent& event) override;
  void OnBucketDone(const BucketDoneEvent& event) override;
  void OnIterationEnd(const IterationEndEvent& event) override;

  // A span [start, end] named `name` on `track`; `args_json` is "" or a JSON object body ("\"k\": 1").
  void Span(const std::string& name, int track, absl::Time start, absl::Time end, const std::string& args_json = "");
  // An instant event.
  void Instant(const std::string& name, int track, absl::Time at, const std::string& args_json = "");

  // This rank's events as comma-separated JSON objects (no brackets).
  std::string EventsJson() const;
  // The number of events recorded.
  size_t size() const { return events_.size(); }

 private:
  int rank_;
  std::vector<std::string> events_;
  std::vector<std::pair<absl::Time, absl::Time>> iteration_comm_;  // this iteration's bucket spans
};

// Gathers every rank's events to rank 0 (collective: every rank must call it) and rank 0 writes one
// Chrome trace JSON file at `path` (atomically) with a named process per rank and named tracks. Errors
// name the file and the errno text, or the collective.
absl::Status WriteMergedTrace(const TraceRecorder& recorder, ProcessGroup& group, const std::string& path);
// The same with the events of several recorders of this rank (e.g. the Reducer's and a ModuleTracer's,
// all on absl::Now()'s clock), concatenated. REQUIRES: every recorder is non-null and records this rank.
absl::Status WriteMergedTrace(const std::vector<const TraceRecorder*>& recorders, ProcessGroup& group,
                              const std::string& path);

}  // namespace ddp

#endif  // DDP_REDUCER_TRACE_H_
