// The DDP step simulator: predicts one training step's time, communication and exposed communication
// from a compute profile (when each gradient becomes ready) and a link model, by replaying the Reducer's
// schedule. A pure function, tested on hand-computed schedules.
//
// Note [Simulated schedule]
// The simulator follows the Reducer (Note [Reducer flow] in reducer/reducer.h) step by step:
//   1. Buckets come from reducer/bucket_assignment.h's AssignBuckets, the Reducer's own code: with
//      rebuild_buckets (the steady state after Note [Bucket rebuild]) in the profile's observed ready
//      order, otherwise in reverse registration order.
//   2. Bucket b is ready when its last parameter's gradient is (the latest ready_s among them), and
//      launches when it is ready and buckets 0..b-1 have launched: launch_b = max(ready_b, launch_{b-1}).
//      With overlap off (the delay_reduction ablation) every bucket launches when backward ends.
//   3. At most max_in_flight collectives run at once, started in issue order (Gloo's worker thread: one):
//      start_b = max(launch_b, end_{b - max_in_flight}); end_b = start_b + AllReduceSeconds(bytes_b).
//      Collectives in flight together are taken to run at full speed each (no sharing of the link).
//   4. exposed = max(0, last end - backward end); step = forward_s + backward end + exposed + other_s.
//   5. Every all-reduce needs every rank: bucket b starts no earlier than the slowest rank launches it,
//      StragglerDelay(step_jitter_s, p, fraction of the compute done at its launch) after this (average)
//      rank does (Note [Straggler wait] in sim/straggler.h), so a noisy step's exposed time grows with p.
//   6. With comm_after_first_backward (ranks that share one machine's cores, one each, at real-time
//      priority: a communication thread cannot take a core from a computing rank) an all-reduce also
//      starts no earlier than the first rank's end of backward, StragglerDelay(step_jitter_s, p, 1) before
//      this (average) rank's: that rank then waits and its core is free, and every rank's communication
//      thread runs there while the others still compute. One bucket launched during backward thus gets a
//      head start of about twice the straggler wait over the no_overlap schedule; with no jitter, or one
//      rank, it is that schedule. (A 2-rank cnn trace over a 1 Gbit/s namespace link under chrt -f 5
//      shows it: the first bucket's all-reduce starts at rank 0's own end of backward in the steps where
//      rank 0 finishes first, and before it in the others.)
//      Until the slowest rank ends backward (StragglerDelay(step_jitter_s, p, 1) after this rank) every
//      rank's communication shares that one core: an all-reduce progresses at the speed of
//      shared_core_link (what bench/allreduce measures with both ranks pinned to one core), then at the
//      link's. Where the CPU is not what limits the link (a network), the two are the same and the option is
//      left empty; on loopback TCP or shared memory, where communication is the CPU copying, it is slower.
// Times are seconds from the start of backward.
// Contention: while an all-reduce runs, backward computes at (1 - compute_lost_to_comm) of its speed, so
// ready times and the end of backward stretch (0: communication has its own engine, e.g. a spare core or
// DMA; 1: communication takes the compute core, e.g. two ranks on two cores, where overlap saves nothing).
// The profile's ready times are compute time without contention.
// Token-bucket links (Note [Token-bucket links] in sim/link_model.h): each all-reduce spends the burst in
// hand and the link refills it while idle, between the buckets of a step and from one step's last
// all-reduce to the next step's first. The steady state's burst at the first all-reduce is found by
// repeating the step until it settles.
#ifndef DDP_SIM_STEP_SIMULATOR_H_
#define DDP_SIM_STEP_SIMULATOR_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reducer/bucket_assignment.h"
#include "sim/link_model.h"
#include "tensor/dtype.h"

namespace ddp {
namespace sim {

// One parameter as the simulator sees it.
struct ParameterTiming {
  std::string name;    // e.g. "fc1.weight"
  int64_t numel = 0;   // elements
  double ready_s = 0;  // when its gradient is final, in seconds after backward started
};

// The compute side of one training step on one rank, measured once (a trace) or made up (synthetic).
struct ComputeProfile {
  std::vector<ParameterTiming> params;  // registration order (the model's parameter order)
  std::vector<size_t> ready_order;      // indices into params in the order the gradients became ready
                                        // (what the bucket rebuild records); empty: by ready_s
  double forward_s = 0;                 // forward pass
  double backward_s = 0;                // backward start -> every gradient produced
  double other_s = 0;                   // the rest of a step: optimizer, zero_grad, write-back, the loop
  double step_jitter_s = 0;             // spread (a standard deviation) of one rank's forward + backward +
                                        // other over steps: the straggler wait (Note [Straggler wait]); 0: none
  DType dtype = DType::kFloat32;        // the gradients' element type
};

// What to simulate.
struct SimOptions {
  BucketCaps caps;              // the Reducer's caps (PyTorch's defaults)
  bool rebuild_buckets = true;  // the steady state after Note [Bucket rebuild]
  bool overlap = true;          // false: every bucket launches after backward
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kRing;
  Cluster cluster;                         // world size and links
  int max_in_flight = 1;                   // collectives run at once (Gloo: 1)
  double compute_lost_to_comm = 0;         // contention, 0..1 (Note [Simulated schedule])
  bool comm_after_first_backward = false;  // all-reduces run on the core the first rank frees (step 6)
  std::optional<LinkSpec> shared_core_link;  // step 6: the one-host link while that core is all there is;
                                             // empty: cluster.intra
};

// One bucket's simulated life, in seconds after backward started.
struct BucketTiming {
  size_t bytes = 0;
  size_t params = 0;
  double ready_s = 0;   // its last gradient is ready
  double launch_s = 0;  // the Reducer launches it
  double start_s = 0;   // its all-reduce starts
  double end_s = 0;     // its all-reduce ends
};

// One simulated step.
struct StepPrediction {
  std::vector<std::vector<size_t>> buckets;  // parameter indices per bucket, in launch order
  std::vector<BucketTiming> bucket_times;    // one per bucket, same order
  double forward_s = 0;
  double backward_s = 0;  // backward start -> every gradient produced, stretched by contention
  double other_s = 0;
  double comm_s = 0;             // union of the all-reduce intervals
  double overlapped_comm_s = 0;  // the part of comm_s before backward ended
  double exposed_comm_s = 0;  // backward end -> last all-reduce end (waiting for the slowest rank included)
  double straggler_s = 0;     // the slowest rank's delay at the end of backward (Note [Straggler wait])
  double step_s = 0;          // forward + backward + exposed + other
  double first_burst_bytes = 0;  // burst in hand when the first all-reduce starts (token-bucket links)
};

// The bucket layout the Reducer would use for `profile` under `options` (step 1 of Note [Simulated
// schedule]). REQUIRES: profile.ready_order is empty or a permutation of the parameter indices.
std::vector<std::vector<size_t>> SimulatedBuckets(const ComputeProfile& profile, const SimOptions& options);

// Replays one steady-state DDP step (Note [Simulated schedule]). REQUIRES: options.max_in_flight >= 1,
// 0 <= compute_lost_to_comm <= 1,
// cluster.world_size >= 1, and what SimulatedBuckets requires.
StepPrediction SimulateStep(const ComputeProfile& profile, const SimOptions& options);

// The best of several cap settings for one profile and cluster.
struct CapChoice {
  BucketCaps caps;
  StepPrediction prediction;
};

// The share of a step a cap setting must be predicted to save before a chooser moves off the current caps:
// the simulator's median error against measured sweeps is a few percent (BENCHMARKS.md, section Simulator
// validation), so a smaller predicted gain is inside the model's error. --bucket_cap_mb=auto and `ddp_sim
// validate` use it.
inline constexpr double kMinPredictedGain = 0.03;

// Simulates `options` once per entry of `candidates` (options.caps replaced) and returns the one with the
// shortest step; ties go to the earlier candidate. REQUIRES: candidates non-empty, and what SimulateStep
// requires.
CapChoice ChooseCaps(const ComputeProfile& profile, const SimOptions& options,
                     const std::vector<BucketCaps>& candidates);

// A table of `prediction`: one line per bucket (bytes, params, ready, launch, start, end in ms) and a
// summary line (step, comm, exposed comm in ms).
std::string DescribePrediction(const StepPrediction& prediction);

}  // namespace sim
}  // namespace ddp

#endif  // DDP_SIM_STEP_SIMULATOR_H_
