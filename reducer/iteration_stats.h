// Per-iteration timing of DDP: forward, backward compute, communication, and how much of the
// communication overlapped backward. Pure helpers, tested alone, and the Reducer observer that applies
// them to every synchronised iteration (Note [Reducer observers] in reducer_observer.h).
#ifndef DDP_REDUCER_ITERATION_STATS_H_
#define DDP_REDUCER_ITERATION_STATS_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "reducer/reducer_observer.h"

namespace ddp {

// The timing of one synchronised iteration, in seconds.
struct IterationStats {
  int64_t iteration = 0;          // synchronised iterations before this one
  int buckets = 0;                // buckets in the layout this iteration used
  double forward_s = 0;           // DDP forward: buffer broadcast, module forward, a due bucket rebuild
  double backward_compute_s = 0;  // end of forward -> every gradient produced; includes the unused search
  double comm_s = 0;              // union of the buckets' communication intervals
  double overlapped_comm_s = 0;   // the part of comm_s before backward finished
  double exposed_comm_s = 0;      // backward finished -> last bucket done (what the host waits for)
  int64_t bytes_sent = 0;         // bytes this rank handed to the buckets' collectives (the hooks' payloads;
                                  // a ring all-reduce moves about 2 (W-1)/W times that over the wire)
};

// A closed time interval.
struct TimeInterval {
  absl::Time start;
  absl::Time end;
};

// Fills comm_s, overlapped_comm_s and exposed_comm_s from the buckets' intervals and the moment
// backward finished. Intervals may overlap and come in any order; empty input gives zeros.
void ComputeOverlap(const std::vector<TimeInterval>& comm, absl::Time backward_end, IterationStats* stats);

// A table with the mean and the 90th percentile of every field over `history` (skipping the first
// `warmup` iterations when more remain), as rank 0 prints at the end of a run: the times in ms, then
// the bytes sent per step in KiB.
std::string FormatStatsTable(const std::vector<IterationStats>& history, int warmup = 1);

// Keeps the IterationStats of every iteration it observes: the communication intervals of the buckets
// (OnBucketDone) and the iteration's times (OnIterationEnd), through ComputeOverlap. The Reducer attaches
// one unless ReducerOptions::record_stats is off. Not thread-safe (the training thread records).
class IterationStatsRecorder : public ReducerObserver {
 public:
  void OnBucketDone(const BucketDoneEvent& event) override;
  void OnIterationEnd(const IterationEndEvent& event) override;

  // One entry per observed iteration, oldest first.
  const std::vector<IterationStats>& history() const { return history_; }

 private:
  std::vector<TimeInterval> comm_;  // the current iteration's bucket intervals
  int64_t bytes_sent_ = 0;          // the current iteration's bucket payloads
  std::vector<IterationStats> history_;
};

}  // namespace ddp

#endif  // DDP_REDUCER_ITERATION_STATS_H_
