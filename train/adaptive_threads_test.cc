// ThreadCountChooser (Note [Adaptive kernel threads]) against simulated step times: a quiet machine keeps
// --threads, a loaded one drops to the faster count after the first probe and comes back when the load
// goes; a count's first, slow step (its kernels' plans) never decides; a gain under the margin does not
// switch; one thread never probes. AdaptiveThreads sets the thread count each step asks for; the warning
// for more kernel threads than CPUs.
#include "train/adaptive_threads.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tensor/threads.h"

namespace ddp {
namespace {

// Step seconds for a count; `first` is the first step ever run at that count.
using StepTimes = std::function<double(int threads, bool first)>;

struct SimulatedRun {
  std::vector<int> threads;            // per step
  std::map<int, std::string> changes;  // step index -> the chooser's line
  int ends_at = 0;                     // the chooser's current count after the last step
};

// Runs `steps` more steps of `chooser` with durations from `times`, appending them to `run`.
void Simulate(ThreadCountChooser& chooser, int steps, const StepTimes& times, SimulatedRun& run) {
  std::set<int> seen;
  for (int t : run.threads) seen.insert(t);
  for (int i = 0; i < steps; ++i) {
    const int threads = chooser.ThreadsForNextStep();
    const bool first = seen.insert(threads).second;
    run.threads.push_back(threads);
    if (auto change = chooser.StepTook(times(threads, first))) {
      run.changes[static_cast<int>(run.threads.size()) - 1] = *change;
    }
  }
  run.ends_at = chooser.current();
}

// `steps` steps of a new chooser for `max_threads` (the other options at their defaults: probes of 3
// steps every 100, a 5% margin).
SimulatedRun SimulateNew(int max_threads, int steps, const StepTimes& times) {
  AdaptiveThreadsOptions options;
  options.max_threads = max_threads;
  ThreadCountChooser chooser(options);
  SimulatedRun run;
  Simulate(chooser, steps, times, run);
  return run;
}

// A step's seconds: `at_one` with one thread, `at_two` with two; a count's first step takes a second.
StepTimes Times(double at_one, double at_two) {
  return [at_one, at_two](int threads, bool first) { return first ? 1.0 : (threads == 1 ? at_one : at_two); };
}

int CountOf(const std::vector<int>& threads, int value, size_t from = 0) {
  int count = 0;
  for (size_t i = from; i < threads.size(); ++i) count += threads[i] == value;
  return count;
}

TEST(AdaptiveThreadsTest, CandidatesArePowersOfTwoBelowTheMaximumAndTheMaximum) {
  EXPECT_EQ(CandidateThreadCounts(1), std::vector<int>({1}));
  EXPECT_EQ(CandidateThreadCounts(2), std::vector<int>({1, 2}));
  EXPECT_EQ(CandidateThreadCounts(6), std::vector<int>({1, 2, 4, 6}));
  EXPECT_EQ(CandidateThreadCounts(8), std::vector<int>({1, 2, 4, 8}));
}

// Quiet: two threads are faster. The first probe comes after one untimed and three timed steps at two
// threads (steps 4-7 at one thread: one untimed, three timed); the count stays, and the next probe comes
// 100 steady steps later.
TEST(AdaptiveThreadsTest, AQuietMachineKeepsTheConfiguredCount) {
  const SimulatedRun run = SimulateNew(2, 250, Times(/*at_one=*/0.015, /*at_two=*/0.010));
  EXPECT_TRUE(run.changes.empty()) << run.changes.begin()->second;
  EXPECT_EQ(run.ends_at, 2);
  EXPECT_EQ(std::vector<int>(run.threads.begin(), run.threads.begin() + 9),
            std::vector<int>({2, 2, 2, 2, 1, 1, 1, 1, 2}));
  EXPECT_EQ(CountOf(run.threads, 1), 12);  // probes of four steps at 4, 108 and 212
  EXPECT_EQ(std::vector<int>(run.threads.begin() + 108, run.threads.begin() + 112), std::vector<int>(4, 1));
}

// Loaded: one thread is faster (two threads wait for the one that shares a core). The first probe
// switches to one thread, says so, and later probes of two threads do not switch back while the load lasts;
// when it goes, the next probe returns to two threads.
TEST(AdaptiveThreadsTest, ALoadedMachineDropsToTheFasterCountAndComesBack) {
  AdaptiveThreadsOptions options;
  options.max_threads = 2;
  ThreadCountChooser chooser(options);  // one chooser through the load and after it
  SimulatedRun run;
  Simulate(chooser, 300, Times(/*at_one=*/0.017, /*at_two=*/0.040), run);
  ASSERT_EQ(run.changes.size(), 1u);
  EXPECT_EQ(run.changes.begin()->first, 7);
  EXPECT_EQ(run.changes.begin()->second,
            "adaptive threads: 2 -> 1 kernel threads (median step 17.0 ms at 1, 40.0 ms at 2)");
  EXPECT_EQ(chooser.current(), 1);
  EXPECT_EQ(CountOf(run.threads, 2, 8), 8) << "two probes of two threads after the switch";
  Simulate(chooser, 150, Times(/*at_one=*/0.017, /*at_two=*/0.011), run);
  ASSERT_EQ(run.changes.size(), 2u);
  EXPECT_EQ(run.changes.rbegin()->second,
            "adaptive threads: 1 -> 2 kernel threads (median step 11.0 ms at 2, 17.0 ms at 1)");
  EXPECT_EQ(chooser.current(), 2);
}

// A count's first step (plan creation, a second here) is never timed: had it counted, one thread's first
// probe step would have kept two threads on the loaded machine above, or the current count's first step
// would have made one thread look faster on a quiet one.
TEST(AdaptiveThreadsTest, ACountsFirstStepDoesNotDecide) {
  const SimulatedRun run = SimulateNew(2, 20, [](int threads, bool first) {
    return first && threads == 2 ? 5.0 : threads == 1 ? 0.015 : 0.010;
  });
  EXPECT_EQ(run.ends_at, 2);
  EXPECT_TRUE(run.changes.empty());
}

TEST(AdaptiveThreadsTest, AGainUnderTheMarginDoesNotSwitch) {
  const SimulatedRun run = SimulateNew(2, 120, Times(/*at_one=*/0.0098, /*at_two=*/0.0100));  // 2% faster
  EXPECT_EQ(run.ends_at, 2);
  EXPECT_TRUE(run.changes.empty());
}

TEST(AdaptiveThreadsTest, OneThreadNeverProbes) {
  const SimulatedRun run = SimulateNew(1, 300, Times(0.01, 0.001));
  EXPECT_EQ(CountOf(run.threads, 1), 300);
  EXPECT_TRUE(run.changes.empty());
}

// With four threads the probe tries one and two; the fastest of all wins.
TEST(AdaptiveThreadsTest, TheFastestCandidateWins) {
  const std::map<int, double> seconds = {{1, 0.030}, {2, 0.012}, {4, 0.020}};
  const SimulatedRun run =
      SimulateNew(4, 20, [&seconds](int threads, bool first) { return first ? 1.0 : seconds.at(threads); });
  EXPECT_EQ(run.ends_at, 2);
  ASSERT_EQ(run.changes.size(), 1u);
  EXPECT_EQ(run.changes.begin()->second,
            "adaptive threads: 4 -> 2 kernel threads (median step 12.0 ms at 2, 20.0 ms at 4)");
}

TEST(AdaptiveThreadsTest, WarnsWhenTheKernelThreadsOutnumberTheCpus) {
  EXPECT_FALSE(KernelThreadsWarning(1, 2, "local ranks", 2, true));
  EXPECT_FALSE(KernelThreadsWarning(2, 1, "local ranks", 2, true));
  EXPECT_EQ(KernelThreadsWarning(2, 2, "local ranks", 2, true).value_or(""),
            "train: warning: 2 local ranks x --threads=2 = 4 kernel threads on 2 usable CPUs: every parallel "
            "region waits for threads that wait for a CPU (BENCHMARKS.md \"Kernel threads under load\"); use "
            "--threads=1, or --adapt_threads");
  EXPECT_EQ(
      KernelThreadsWarning(4, 3, "DataParallel workers", 8, false).value_or(""),
      "train: warning: 3 DataParallel workers x --threads=4 = 12 kernel threads on 8 usable CPUs: every "
      "parallel region waits for threads that wait for a CPU (BENCHMARKS.md \"Kernel threads under load\"); "
      "use --threads=2");
}

// The observer sets the count each step asks for on the calling thread.
TEST(AdaptiveThreadsTest, TheObserverSetsTheThreadCount) {
  AdaptiveThreadsOptions options;
  options.max_threads = 2;
  AdaptiveThreads adaptive(options, nullptr);
  std::vector<int> seen;
  for (int i = 0; i < 8; ++i) {  // up to the first probe's decision, which these empty steps leave to chance
    adaptive.StepBegan();
    seen.push_back(GetNumThreads());
    adaptive.StepEnded();
  }
  EXPECT_EQ(seen, std::vector<int>({2, 2, 2, 2, 1, 1, 1, 1}));
  SetNumThreads(1);
}

}  // namespace
}  // namespace ddp
