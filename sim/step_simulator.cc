#include "sim/step_simulator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sim/straggler.h"
#include "base/check.h"

namespace ddp {
namespace sim {
namespace {

// The visiting order of the bucket rebuild: the recorded ready order, or by ready time (ties keep the
// reverse registration order, as backward produces the last layer first).
std::vector<size_t> ObservedOrder(const ComputeProfile& profile) {
  if (!profile.ready_order.empty()) return profile.ready_order;
  std::vector<size_t> order(profile.params.size());
  std::iota(order.rbegin(), order.rend(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return profile.params[a].ready_s < profile.params[b].ready_s; });
  return order;
}

// The wall time at which backward has done `work` seconds of compute, when it runs at (1 - lost) of its
// speed during the communication `times[0..count)` (disjoint or not, in start order).
double WallOf(double work, const std::vector<BucketTiming>& times, size_t count, double lost) {
  double wall = 0, done = 0;
  for (size_t b = 0; b < count; ++b) {
    const double start = std::max(times[b].start_s, wall), end = std::max(times[b].end_s, wall);
    if (done + (start - wall) >= work) return wall + (work - done);
    done += start - wall;
    const double slow = (end - start) * (1 - lost);
    if (lost < 1 && done + slow >= work) return start + (work - done) / (1 - lost);
    done += slow;
    wall = end;
  }
  return wall + (work - done);
}

// The work (compute seconds) after which bucket b's last gradient is ready.
double ReadyWork(const ComputeProfile& profile, const std::vector<size_t>& bucket) {
  double ready = 0;
  for (size_t i : bucket) ready = std::max(ready, profile.params[i].ready_s);
  return ready;
}

// The end of an all-reduce of `bytes` that starts at `start` and takes `full_s` at the link's speed, when
// until `shared_until` it runs at shared_core_link's speed (step 6 of Note [Simulated schedule]).
double EndWithSharedCore(const SimOptions& options, double bytes, double start, double full_s,
                         double shared_until) {
  if (!options.shared_core_link || start >= shared_until) return start + full_s;
  Cluster shared = options.cluster;
  shared.intra = *options.shared_core_link;
  const double shared_s = AllReduceSeconds(options.algorithm, shared, bytes);
  if (shared_s <= 0) return start + full_s;
  const double done = (shared_until - start) / shared_s;  // the share of the all-reduce done on one core
  if (done >= 1) return start + shared_s;
  return shared_until + (1 - done) * full_s;
}

// Fills comm_s and overlapped_comm_s: the union of the intervals, and its part before `backward_end`.
void MeasureComm(const std::vector<BucketTiming>& times, double backward_end, StepPrediction* out) {
  std::vector<std::pair<double, double>> spans;
  for (const BucketTiming& t : times) spans.emplace_back(t.start_s, t.end_s);
  std::sort(spans.begin(), spans.end());
  double covered_until = -1e300;
  for (const auto& [start, end] : spans) {
    const double from = std::max(start, covered_until);
    if (end <= from) continue;
    out->comm_s += end - from;
    out->overlapped_comm_s += std::max(0.0, std::min(end, backward_end) - from);
    covered_until = end;
  }
}

// The burst of `link` after it has idled `idle_s` with `tokens` in hand (Note [Token-bucket links]).
double Refill(double tokens, double idle_s, const LinkSpec& link) {
  if (link.burst_bytes <= 0) return 0;
  if (link.beta_s_per_byte <= 0) return link.burst_bytes;
  return std::min(link.burst_bytes, tokens + std::max(0.0, idle_s) / link.beta_s_per_byte);
}

// One pass of Note [Simulated schedule] with `tokens` bytes of burst in hand when the first all-reduce
// starts; `*tokens_left` gets what is left after the last one.
StepPrediction SimulateWithTokens(const ComputeProfile& profile, const SimOptions& options, double tokens,
                                  double* tokens_left) {
  StepPrediction out;
  const double lost = options.compute_lost_to_comm;
  out.buckets = SimulatedBuckets(profile, options);
  out.bucket_times.resize(out.buckets.size());
  out.first_burst_bytes = tokens;
  const LinkSpec limited = BurstLimitedLink(options.algorithm, options.cluster, 0).link;
  const size_t k = static_cast<size_t>(options.max_in_flight);
  double last_end = 0, previous_launch = 0;
  const double compute = profile.other_s + profile.forward_s + profile.backward_s;
  // Step 6: how far the first and the last rank end backward before and after this (average) one.
  const double rank_spread = StragglerDelay(profile.step_jitter_s, options.cluster.world_size, 1.0);
  for (size_t b = 0; b < out.buckets.size(); ++b) {
    // Launches are in index order and a bucket starts after its launch, so only buckets before b can slow
    // the compute that makes b ready (Note [Simulated schedule]).
    BucketTiming& t = out.bucket_times[b];
    for (size_t i : out.buckets[b])
      t.bytes += static_cast<size_t>(profile.params[i].numel) * ElementSize(profile.dtype);
    t.params = out.buckets[b].size();
    t.ready_s = WallOf(ReadyWork(profile, out.buckets[b]), out.bucket_times, b, lost);
    // This rank's end of backward, given the contention of the buckets before b.
    const double backward_end = WallOf(profile.backward_s, out.bucket_times, b, lost);
    const double earliest = options.overlap ? previous_launch : backward_end;
    t.launch_s = previous_launch = std::max(t.ready_s, earliest);
    // The compute between the ranks' last sync (the previous step's all-reduces) and this launch.
    const double since_sync = profile.other_s + profile.forward_s + std::min(t.launch_s, profile.backward_s);
    const double straggler = StragglerDelay(profile.step_jitter_s, options.cluster.world_size,
                                            compute > 0 ? since_sync / compute : 1.0);
    t.start_s = std::max(t.launch_s + straggler, b >= k ? out.bucket_times[b - k].end_s : 0.0);
    if (options.comm_after_first_backward) t.start_s = std::max(t.start_s, backward_end - rank_spread);
    if (b > 0) tokens = Refill(tokens, t.start_s - last_end, limited);
    const double bytes = static_cast<double>(t.bytes);
    const double full_s = AllReduceSecondsWithTokens(options.algorithm, options.cluster, bytes, &tokens);
    t.end_s = options.comm_after_first_backward
                  ? EndWithSharedCore(options, bytes, t.start_s, full_s, backward_end + rank_spread)
                  : t.start_s + full_s;
    last_end = std::max(last_end, t.end_s);
  }
  *tokens_left = tokens;
  out.forward_s = profile.forward_s;
  out.backward_s = WallOf(profile.backward_s, out.bucket_times, out.bucket_times.size(), lost);
  out.other_s = profile.other_s;
  MeasureComm(out.bucket_times, out.backward_s, &out);
  out.exposed_comm_s = std::max(0.0, last_end - out.backward_s);
  out.straggler_s = StragglerDelay(profile.step_jitter_s, options.cluster.world_size, 1.0);
  out.step_s = out.forward_s + out.backward_s + out.exposed_comm_s + out.other_s;
  return out;
}

}  // namespace

std::vector<std::vector<size_t>> SimulatedBuckets(const ComputeProfile& profile, const SimOptions& options) {
  std::vector<BucketParameter> params;
  for (const ParameterTiming& p : profile.params) {
    BucketParameter bp;
    bp.numel = p.numel;
    bp.dtype = profile.dtype;
    params.push_back(bp);
  }
  return AssignBuckets(params, options.caps,
                       options.rebuild_buckets ? ObservedOrder(profile) : std::vector<size_t>{});
}

StepPrediction SimulateStep(const ComputeProfile& profile, const SimOptions& options) {
  DDP_CHECK(options.max_in_flight >= 1) << "max_in_flight " << options.max_in_flight;
  DDP_CHECK(options.compute_lost_to_comm >= 0 && options.compute_lost_to_comm <= 1)
      << "compute_lost_to_comm " << options.compute_lost_to_comm;
  const LinkSpec limited = BurstLimitedLink(options.algorithm, options.cluster, 0).link;
  double tokens = std::max(0.0, limited.burst_bytes), left = 0;
  StepPrediction out = SimulateWithTokens(profile, options, tokens, &left);
  // The steady state: the next step's first all-reduce starts step_s after this one's, and the link
  // refills from this step's last end until then. Starting from a full bucket, the burst in hand can only
  // fall (less burst, longer communication, no longer an idle gap), so the passes settle on the fixed point.
  for (int pass = 0; pass < 50 && limited.burst_bytes > 0 && !out.bucket_times.empty(); ++pass) {
    double last_end = 0;
    for (const BucketTiming& t : out.bucket_times) last_end = std::max(last_end, t.end_s);
    const double next = Refill(left, out.step_s + out.bucket_times.front().start_s - last_end, limited);
    if (std::abs(next - tokens) < 1.0) break;
    tokens = next;
    out = SimulateWithTokens(profile, options, tokens, &left);
  }
  return out;
}

CapChoice ChooseCaps(const ComputeProfile& profile, const SimOptions& options,
                     const std::vector<BucketCaps>& candidates) {
  DDP_CHECK(!candidates.empty()) << "ChooseCaps needs at least one candidate";
  CapChoice best;
  for (size_t i = 0; i < candidates.size(); ++i) {
    SimOptions trial = options;
    trial.caps = candidates[i];
    StepPrediction prediction = SimulateStep(profile, trial);
    if (i == 0 || prediction.step_s < best.prediction.step_s)
      best = CapChoice{candidates[i], std::move(prediction)};
  }
  return best;
}

std::string DescribePrediction(const StepPrediction& p) {
  std::string out = absl::StrFormat("%6s %12s %7s %9s %9s %9s %9s\n", "bucket", "bytes", "params", "ready ms",
                                    "launch ms", "start ms", "end ms");
  for (size_t b = 0; b < p.bucket_times.size(); ++b) {
    const BucketTiming& t = p.bucket_times[b];
    absl::StrAppendFormat(&out, "%6d %12d %7d %9.3f %9.3f %9.3f %9.3f\n", b, t.bytes, t.params,
                          1e3 * t.ready_s, 1e3 * t.launch_s, 1e3 * t.start_s, 1e3 * t.end_s);
  }
  absl::StrAppendFormat(
      &out,
      "step %.3f ms = forward %.3f + backward %.3f + exposed comm %.3f + other %.3f; comm %.3f ms; the slowest "
      "rank %.3f ms behind at the end of backward\n",
      1e3 * p.step_s, 1e3 * p.forward_s, 1e3 * p.backward_s, 1e3 * p.exposed_comm_s, 1e3 * p.other_s,
      1e3 * p.comm_s, 1e3 * p.straggler_s);
  return out;
}

}  // namespace sim
}  // namespace ddp
