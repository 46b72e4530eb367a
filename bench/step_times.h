// Per-step wall times of a timed training loop: their spread, and a file of them for scripts.
//
// Why: 2-rank data-parallel training meets once a step, so each step lasts as long as the slower rank's.
// A machine whose single process already varies from step to step costs every lockstep job the expected
// maximum of two such times over their mean, whatever the transport. bench/compare_ddp.sh reads two
// concurrent processes' files and reports that bound ("noise bound").
#ifndef DDP_BENCH_STEP_TIMES_H_
#define DDP_BENCH_STEP_TIMES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ddp {

// The spread of a loop's step times, in milliseconds: median and 90th percentile (Percentile in
// base/statistics.h, as the Reducer's stats table), and the coefficient of variation (population
// standard deviation over the mean).
struct StepTimeSpread {
  double p50_ms = 0;
  double p90_ms = 0;
  double cv = 0;
};

// The spread of `step_ms` (milliseconds per step). REQUIRES: not empty, every value > 0.
StepTimeSpread SpreadOf(const std::vector<double>& step_ms);

// Writes one step time per line ("%.4f" ms) to `path`, replacing it. Fails with a status naming the
// path when it cannot be written; the file is then incomplete or absent.
absl::Status WriteStepTimes(const std::string& path, const std::vector<double>& step_ms);

}  // namespace ddp

#endif  // DDP_BENCH_STEP_TIMES_H_
