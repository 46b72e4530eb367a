// --bucket_cap_mb=auto: DDP measures its own first iterations, the step simulator
// (sim/step_simulator.h) picks the bucket caps on rank 0, and every rank rebuilds its buckets once more.
//
// Note [Auto bucket caps]
//   1. Measure. An observer of the Reducer (Note [Reducer observers]) records, for `measure_steps`
//      synchronised iterations after the first `skip_iterations` (the first runs before the bucket
//      rebuild, the next ones warm the new buffers and caches): when each gradient became ready, forward
//      and backward times, and every bucket's communication interval and size. No trace is needed.
//   2. Fit. The compute profile is the mean over those iterations, built as sim/profile.h builds one
//      from a trace (Note [Profile from a trace]): ready offsets from backward start, forward, backward,
//      other = next forward - backward end - exposed communication (the ready times are measured while
//      the buckets' all-reduces run, so they carry that run's contention). The link is a line
//      t(n) = a + b n (sim/link_model.h, FitLine) through all-reduces of five probe sizes that every rank
//      runs at the choice, over the run's own group, timed from issue to completion as the Reducer pays
//      for a bucket (median of three each), read as a ring (LinkFromRingFit). The buckets' own all-reduce
//      times are not used: a bucket also waits for the slowest rank to launch it (the last one for the
//      slowest backward), which is skew, not link, and is paid whatever the caps; and the buckets may all
//      have one size. The contention, the share of compute lost while an all-reduce runs
//      (compute_lost_to_comm), is the value in {0, 0.25, ..., 1} whose simulation of the caps that ran
//      comes closest to the measured step time: what the run itself says about its cores.
//   3. Choose. Rank 0 simulates every candidate (first cap x cap, the current caps first so that a tie
//      keeps them) with ChooseCaps; the winner replaces the current caps only if it is predicted to save
//      at least `min_predicted_gain` (3%) of a step: the simulator's median error against measured
//      sweeps is a few percent (BENCHMARKS.md, section Simulator validation), and on a 1 Gbit link on two
//      busy cores choices predicted to save 1% run slower. Rank 0 broadcasts the choice; every rank calls
//      Rebucket with it unless it keeps the caps (then the buckets stay as they are). Rank 0 prints the
//      choice with its predicted step time, and after `report_steps` more iterations (the first after the
//      choice left out) the step time measured under it.
//   4. Resume. Checkpoints record the choice once made as a named extra-state entry (AutoBucketCapsRecord,
//      train/auto_bucket_caps_record.h: the caps, the world size and backend they were chosen for, the
//      predicted and measured step times). A run resumed
//      with --bucket_cap_mb=auto hands the record to ResumeFrom before its first forward, right after the
//      saved bucket order is restored: rank 0 reads it and broadcasts what to do, so the ranks agree
//      whatever their files say. A choice made for the same world size and backend is applied through the
//      same Rebucket as step 3, before the first resumed step, which is where the interrupted run had it
//      (the choice is made before the step's checkpoint is taken, train/train_step.cc), and nothing is
//      measured again; the step time under it is still reported. A choice made for another world size or
//      backend does not describe this run's link or per-rank work: it is measured and chosen again.
// The whole choice is deterministic given rank 0's measurements, and the gradients do not depend on the
// caps beyond the rounding of the sum (none at two ranks), so a run with the chosen caps fixed from the
// start trains the same model.
#ifndef DDP_TRAIN_AUTO_BUCKET_CAPS_H_
#define DDP_TRAIN_AUTO_BUCKET_CAPS_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ddp/distributed_data_parallel.h"
#include "reducer/bucket_assignment.h"
#include "reducer/reducer_observer.h"
#include "sim/link_model.h"
#include "sim/step_simulator.h"
#include "train/auto_bucket_caps_record.h"

namespace ddp {

// How --bucket_cap_mb=auto measures and chooses (Note [Auto bucket caps]).
struct AutoBucketCapsOptions {
  int skip_iterations = 5;  // synchronised iterations left out first (before the rebuild, warm-up)
  int measure_steps = 20;   // iterations measured before the choice (train/train: --auto_caps_steps)
  int report_steps = 20;    // iterations measured under the chosen caps before the report
  std::vector<BucketCaps> candidates;  // empty: DefaultCapCandidates()
  std::vector<int64_t> probe_bytes = {16 << 10, 256 << 10, 1 << 20, 4 << 20,
                                      8 << 20};  // probed at the choice
  int probe_repeats = 3;             // each probe size this many times
  double min_predicted_gain = sim::kMinPredictedGain;  // change the caps only if the prediction saves
                                                       // this share of a step
};

// first cap x cap over {0, 1/16, 1/4, 1, 5, 25} MiB x {0, 1/16, 1/4, 1, 5, 25, 100, one bucket}, first <=
// cap.
std::vector<BucketCaps> DefaultCapCandidates();

// "1/25" style label of caps in MiB ("inf": one bucket), as the bucket sweep names its rows.
std::string CapsMiBLabel(const BucketCaps& caps);

// One measured synchronised iteration, times in seconds from its backward start.
struct MeasuredIteration {
  double forward_s = 0;              // forward start -> backward start
  double backward_s = 0;             // backward start -> every gradient produced
  std::vector<double> ready_s;       // per parameter (registration order); < 0: no gradient seen
  std::vector<sim::Sample> buckets;  // each bucket's size and communication time
  double last_comm_end_s = 0;        // the last bucket's communication end
  double step_s = -1;                // forward start -> the next forward start (< 0: not known yet)
};

// The mean step_s of the `iterations` that know theirs (0 when none does).
double MeanStepSeconds(const std::vector<MeasuredIteration>& iterations);

// The compute profile of `iterations` (those with a known step_s; Note [Auto bucket caps] step 2) for
// parameters `names` / `numels` (registration order), in `ready_order` (empty: by ready time). Errors
// (kFailedPrecondition) when no iteration has a step time.
absl::StatusOr<sim::ComputeProfile> ProfileFromIterations(const std::vector<MeasuredIteration>& iterations,
                                                          const std::vector<std::string>& names,
                                                          const std::vector<int64_t>& numels,
                                                          const std::vector<size_t>& ready_order);

// What the choice found.
struct AutoCapsChoice {
  BucketCaps caps;                      // the winner
  double predicted_step_s = 0;          // its simulated step time
  BucketCaps current_caps;              // the caps that ran while measuring
  double current_measured_step_s = 0;   // their measured mean step time
  double current_predicted_step_s = 0;  // and their simulated one (after the contention fit)
  sim::LineFit link_fit;                // the all-reduce line through the samples
  double compute_lost_to_comm = 0;      // the fitted contention
};

// Pure: fits the link through `samples` at `world_size` ranks, the contention against
// `measured_step_s`, the mean step time of `current_caps`, and picks the best of `candidates` (Note [Auto
// bucket caps]), or keeps `current_caps` unless the best is predicted to be faster by at least
// `min_predicted_gain` (a share of the step). `rebuild_buckets`: whether the buckets follow the profile's
// ready order.
// REQUIRES: world_size >= 2, candidates non-empty. Errors: the link fit's (fewer than two sizes).
absl::StatusOr<AutoCapsChoice> ChooseAutoCaps(const sim::ComputeProfile& profile,
                                              const std::vector<sim::Sample>& samples, int world_size,
                                              const BucketCaps& current_caps, double measured_step_s,
                                              bool rebuild_buckets, const std::vector<BucketCaps>& candidates,
                                              double min_predicted_gain = 0.03);

// The --bucket_cap_mb=auto controller for one DDP module: it observes the Reducer, and the training loop
// calls AfterStep after every optimizer step. Not thread-safe (the training thread drives both).
class AutoBucketCaps : public ReducerObserver {
 public:
  // Attaches to `ddp` (not owned; must outlive the result). Rank 0 prints to `out` (stderr in train).
  // REQUIRES: before the first forward; options' counts >= 1 (skip_iterations >= 0).
  static std::unique_ptr<AutoBucketCaps> Attach(DistributedDataParallel& ddp, AutoBucketCapsOptions options,
                                                FILE* out);

  // After an optimizer step (every rank, between iterations). Collective when the choice is due (probe
  // all-reduces, rank 0's choice broadcast, Rebucket on every rank); rank 0 prints the choice, and later
  // the measured step time. Errors: a failed collective, or a measurement that cannot be fitted.
  absl::Status AfterStep();

  // --resume: `saved` is the checkpoint's record of an earlier choice (absent: none was made), read from
  // `source` (named in the log). Collective: rank 0's decision is broadcast. When the record was made for
  // this group's size and backend, every rank rebuckets with its caps now (the same Rebucket as a fresh
  // choice), the controller counts as chosen without measuring, and rank 0 prints one "reusing the
  // choice" line with the caps; when it was made for another size or backend, rank 0 prints why and the
  // run measures and chooses as a fresh one does (Note [Auto bucket caps] step 4).
  // REQUIRES: before the first forward (after DistributedDataParallel::RestoreBucketOrder).
  absl::Status ResumeFrom(const std::optional<AutoBucketCapsRecord>& saved, const std::string& source);

  // The choice as a checkpoint records it; absent until chosen(). Rank 0's (the one a checkpoint saves)
  // has the predicted step time, and the measured one once reported (or the resumed record's until then).
  std::optional<AutoBucketCapsRecord> Record() const;

  bool chosen() const { return chosen_; }
  // The choice (meaningful once chosen(); on ranks other than 0 only its caps).
  const AutoCapsChoice& choice() const { return choice_; }
  // Mean step time measured under the chosen caps (< 0 until reported).
  double measured_after_s() const { return measured_after_s_; }

  void OnGradientReady(const GradientReadyEvent& event) override;
  void OnBucketDone(const BucketDoneEvent& event) override;
  void OnIterationEnd(const IterationEndEvent& event) override;

 private:
  AutoBucketCaps(DistributedDataParallel& ddp, AutoBucketCapsOptions options, FILE* out);
  absl::Status Choose();
  // Every rank: rebuckets with `caps` unless the buckets already have them, and starts the report's count.
  void ApplyChoice(const BucketCaps& caps);
  absl::StatusOr<std::vector<sim::Sample>> ProbeLink();
  void Report();

  DistributedDataParallel& ddp_;
  AutoBucketCapsOptions options_;
  FILE* out_;
  std::vector<std::string> names_;
  std::vector<int64_t> numels_;
  int64_t steps_ = 0;       // AfterStep calls so far
  bool recording_ = false;  // the current iteration is one to keep
  std::vector<absl::Time> ready_at_;
  std::vector<sim::Sample> bucket_samples_;
  absl::Time last_comm_end_;
  std::vector<MeasuredIteration> measured_;  // before the choice
  std::vector<MeasuredIteration> after_;     // under the chosen caps
  absl::Time last_forward_start_;
  bool have_last_ = false;
  bool chosen_ = false;
  int64_t chosen_at_iteration_ = -1;  // the Reducer's iteration count when the caps changed
  int64_t iterations_seen_ = 0;
  AutoCapsChoice choice_;
  double measured_after_s_ = -1;
  double resumed_measured_s_ = -1;  // the measured step time of a reused record (< 0: none)
};

}  // namespace ddp

#endif  // DDP_TRAIN_AUTO_BUCKET_CAPS_H_
