// Where the simulator's compute profiles come from: a Chrome trace of a real DDP run (train/train
// --trace_out), a profile JSON file (what `ddp_sim profile` writes, or a hand-written model description),
// (synthetic models: sim/synthetic_models.h). Pure functions.
//
// Note [Profile from a trace]
// A trace (reducer/trace.h) has, per rank and iteration, a "forward" span, a "backward" span (backward
// start -> every gradient produced), a "grad ready: <name>" instant per parameter and a "bucket <b> ..."
// span per all-reduce. For each iteration i of rank `rank` whose next forward is in the trace:
//   ready offset of p    = (its grad-ready instant) - backward_i start
//   exposed_i            = max(0, last all-reduce end before the next forward - backward_i end)
//   other_i              = next forward start - backward_i end - exposed_i
// (other: waiting for nothing else, the write-back, optimizer, zero_grad and the loop itself). The profile
// is the mean over the iterations after the first `skip_iterations` (the first ones run before the bucket
// rebuild and while caches warm), and its step_jitter_s the step-to-step spread of forward_i + backward_i +
// other_i over the timed iterations (with iteration ranges, every one a range holds; the mean other
// stands in for a range's last, whose next step follows a layout switch, so blocks of two timed steps
// still give pairs): a standard deviation estimated from the mean absolute difference of consecutive
// iterations (Note [Straggler wait] in sim/straggler.h; neighbours only, so a slow drift of the machine is
// no jitter). The ready order is rank 0's first iteration's, the order the Reducer's
// rebuild records (Note [Bucket rebuild]).
#ifndef DDP_SIM_PROFILE_H_
#define DDP_SIM_PROFILE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sim/step_simulator.h"

namespace ddp {
namespace sim {

// A parameter's name and size, in registration order: what a profile needs besides the timings.
struct ParameterShape {
  std::string name;
  int64_t numel = 0;
};

// How to read a trace.
struct TraceProfileOptions {
  int rank = 0;              // whose track to read
  int skip_iterations = 10;  // iterations left out at the start (warm-up, before the bucket rebuild)
  // When non-empty, only these iterations count, as [first, end) ranges of the rank's iterations
  // (0 = its first in the trace); iteration i counts when some range holds both i and i + 1 (its step
  // ends at the next forward), and skip_iterations still applies. A trace of bench/bucket_sweep_interleaved
  // keeps one configuration's blocks this way (Note [Interleaved sweep]).
  std::vector<std::pair<int64_t, int64_t>> iterations;
};

// Parses "first-end,first-end,..." (end exclusive, first < end) into TraceProfileOptions::iterations.
// Errors (kInvalidArgument) quote the malformed range.
absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> ParseIterationRanges(absl::string_view text);

// The compute profile of `params` (registration order) from the Chrome trace text `trace_json` (Note
// [Profile from a trace]). A parameter's size is the one its grad-ready events carry (reducer/trace.h
// writes "numel", so a trace of a model built for another data set's images or classes profiles with that
// model's sizes), else params[i].numel. Errors (kInvalidArgument) when the text is not a trace, has no
// iteration of `options.rank` after the skipped ones, or names a parameter that `params` lacks.
absl::StatusOr<ComputeProfile> ProfileFromTrace(absl::string_view trace_json,
                                                const std::vector<ParameterShape>& params,
                                                const TraceProfileOptions& options);

// A profile as JSON: {"forward_ms", "backward_ms", "other_ms", "step_jitter_ms", "dtype": "float32",
// "params": [{"name", "numel", "ready_ms"}...], "ready_order": [...]}. Times in milliseconds, parameters in registration order.
std::string ProfileToJson(const ComputeProfile& profile);
// Parses ProfileToJson's form; "ready_order", "dtype" and "step_jitter_ms" may be left out (by ready
// time; float32; 0), so a
// hand-written model description is a list of parameter sizes with their ready times. Errors
// (kInvalidArgument) name the missing or malformed field.
absl::StatusOr<ComputeProfile> ProfileFromJson(absl::string_view json);

}  // namespace sim
}  // namespace ddp

#endif  // DDP_SIM_PROFILE_H_
