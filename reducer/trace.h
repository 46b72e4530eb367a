// Chrome trace events (chrome://tracing, Perfetto) of DDP iterations: forward, backward, gradient
// ready instants, bucket launches and all-reduce spans, one process track per rank.
#ifndef DDP_REDUCER_TRACE_H_
#define DDP_REDUCER_TRACE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace ddp {

class ProcessGroup;

// Collects events of one rank. Not thread-safe (the training thread records).
class TraceRecorder {
 public:
  // Thread (track) ids within a rank's process track.
  static constexpr int kComputeTrack = 0;
  static constexpr int kCommTrack = 1;

  explicit TraceRecorder(int rank) : rank_(rank) {}

  // A span [start, end] named `name` on `track`; `args_json` is "" or a JSON object body ("\"k\": 1").
  void Span(const std::string& name, int track, absl::Time start, absl::Time end, const std::string& args_json = "");
  // An instant event.
  void Instant(const std::string& name, int track, absl::Time at, const std::string& args_json = "");

  // This rank's events as comma-separated JSON objects (no brackets).
  std::string EventsJson() const;
  size_t size() const { return events_.size(); }

 private:
  int rank_;
  std::vector<std::string> events_;
};

// Gathers every rank's events to rank 0 (collective: every rank must call it) and rank 0 writes one
// Chrome trace JSON file at `path` with a named track per rank. Errors name the file or the collective.
absl::Status WriteMergedTrace(const TraceRecorder& recorder, ProcessGroup& group, const std::string& path);

}  // namespace ddp

#endif  // DDP_REDUCER_TRACE_H_
