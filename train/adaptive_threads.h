// --adapt_threads: the step loop chooses its kernel thread count by measuring steps, so that a process
// with several OpenMP threads does not collapse when other processes take some of its cores.
//
// Note [Adaptive kernel threads]
// OpenMP splits each parallel region evenly over its threads and waits for the slowest. When another
// process takes one of the cores, every region waits for the thread that shares that core, and a
// two-thread step runs at 0.4x the speed of one thread (BENCHMARKS.md "DataParallel", under load; PyTorch's
// two-thread step collapses the same way). With --adapt_threads the loop measures instead of assuming: it
// starts at --threads, and after its first steps, then every `probe_every` steps, it runs `probe_steps`
// steps at each other candidate count (1, 2, 4, ... below --threads), each after one untimed step (a
// count's first steps may create its kernels' plans), and keeps the count whose median step is shortest,
// provided it beats the current count's median over its latest steps by at least `margin`. So a quiet
// machine keeps --threads at the cost of a few probe steps, a loaded one drops to what it can give, and
// the count comes back when the load goes. The kernels' results may differ in the order of their float
// sums between thread counts, so a run that changes its count is not bit for bit reproducible (as with
// PyTorch's set_num_threads); without the flag nothing changes. Each rank chooses for itself.
#ifndef DDP_TRAIN_ADAPTIVE_THREADS_H_
#define DDP_TRAIN_ADAPTIVE_THREADS_H_

#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "train/step_observer.h"

namespace ddp {

struct AdaptiveThreadsOptions {
  int max_threads = 1;    // --threads: the count to start at and the largest candidate; >= 1
  int probe_steps = 3;    // timed steps per count in a probe, and the current count's steps it is held to
  int probe_every = 100;  // steps between the end of a probe and the start of the next
  double margin = 0.05;   // a count replaces the current one when its median step is this much shorter
};

// The candidate counts for `max_threads`: 1, 2, 4, ... below it, and max_threads itself, ascending. Pure.
std::vector<int> CandidateThreadCounts(int max_threads);

// The warning a run gets when its kernel threads outnumber the CPUs it may use: `threads` per rank (or per
// DataParallel worker) times `local_ranks` ranks (or workers) on this machine against `usable_cpus`
// (base/usable_cpus.h); nullopt when they fit. `what` names the ranks in the message ("local ranks",
// "DataParallel workers"); `suggest_adapt` adds --adapt_threads to the remedies (not for workers, whose
// thread count it does not set). Pure.
std::optional<std::string> KernelThreadsWarning(int threads, int local_ranks, const char* what,
                                                int usable_cpus, bool suggest_adapt);

// The policy of Note [Adaptive kernel threads], without clocks or side effects: the caller runs each step
// with ThreadsForNextStep() kernel threads and reports its duration to StepTook. Not thread-safe.
class ThreadCountChooser {
 public:
  // REQUIRES: options.max_threads >= 1, probe_steps >= 1, probe_every >= 1, margin in [0, 1) (checked).
  explicit ThreadCountChooser(const AdaptiveThreadsOptions& options);

  // The kernel thread count for the next step.
  int ThreadsForNextStep();

  // The step run with ThreadsForNextStep()'s count took `seconds`. Returns a one-line description when
  // this step ended a probe that changed the count, else nullopt.
  std::optional<std::string> StepTook(double seconds);

  // The count the loop runs at outside probes.
  int current() const { return current_; }

 private:
  struct Planned {
    int threads;
    bool timed;   // counts towards its count's median
    bool probe;   // part of a probe (else a steady step at current_)
    bool decide;  // the last step of a probe: choose after it
  };
  void PlanSteadyStep();
  void PlanProbe();
  std::optional<std::string> Decide();

  AdaptiveThreadsOptions options_;
  std::vector<int> candidates_;
  int current_;
  std::deque<Planned> planned_;
  std::deque<double> recent_;                  // the current count's latest timed steady steps
  std::map<int, std::vector<double>> probed_;  // this probe's timed steps by count
  bool probed_once_ = false;
  bool skip_next_steady_ = true;  // the first step at a count is not timed
  int steady_since_probe_ = 0;
};

// The StepObserver that applies a ThreadCountChooser: SetNumThreads before each step (on the thread that
// runs the step's kernels), the step's wall time after it, and each change of count written to `log` as
// one line. Not thread-safe (the training thread only).
class AdaptiveThreads : public StepObserver {
 public:
  AdaptiveThreads(const AdaptiveThreadsOptions& options, FILE* log);
  void StepBegan() override;
  void StepEnded() override;
  int current() const { return chooser_.current(); }

 private:
  ThreadCountChooser chooser_;
  FILE* log_;
  absl::Time began_;
};

}  // namespace ddp

#endif  // DDP_TRAIN_ADAPTIVE_THREADS_H_
