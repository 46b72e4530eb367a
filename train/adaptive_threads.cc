#include "train/adaptive_threads.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/statistics.h"
#include "tensor/threads.h"

namespace ddp {

std::vector<int> CandidateThreadCounts(int max_threads) {
  std::vector<int> counts;
  for (int count = 1; count < max_threads; count *= 2) counts.push_back(count);
  counts.push_back(max_threads);
  return counts;
}

std::optional<std::string> KernelThreadsWarning(int threads, int local_ranks, const char* what,
                                                int usable_cpus, bool suggest_adapt) {
  const int64_t wanted = static_cast<int64_t>(threads) * local_ranks;
  if (wanted <= usable_cpus) return std::nullopt;
  return absl::StrFormat(
      "train: warning: %d %s x --threads=%d = %d kernel threads on %d usable CPUs: every parallel region "
      "waits "
      "for threads that wait for a CPU (BENCHMARKS.md \"Kernel threads under load\"); use --threads=%d%s",
      local_ranks, what, threads, wanted, usable_cpus, std::max(1, usable_cpus / local_ranks),
      suggest_adapt ? ", or --adapt_threads" : "");
}

ThreadCountChooser::ThreadCountChooser(const AdaptiveThreadsOptions& options)
    : options_(options),
      candidates_(CandidateThreadCounts(options.max_threads)),
      current_(options.max_threads) {
  DDP_CHECK(options.max_threads >= 1 && options.probe_steps >= 1 && options.probe_every >= 1 &&
            options.margin >= 0 && options.margin < 1)
      << "AdaptiveThreadsOptions: max_threads " << options.max_threads << ", probe_steps "
      << options.probe_steps << ", probe_every " << options.probe_every << ", margin " << options.margin
      << " out of range";
}

int ThreadCountChooser::ThreadsForNextStep() {
  if (planned_.empty()) {
    const bool held = recent_.size() >= static_cast<size_t>(options_.probe_steps);
    const bool due = !probed_once_ || steady_since_probe_ >= options_.probe_every;
    if (candidates_.size() > 1 && held && due) {
      PlanProbe();
    } else {
      PlanSteadyStep();
    }
  }
  return planned_.front().threads;
}

void ThreadCountChooser::PlanSteadyStep() {
  planned_.push_back({current_, /*timed=*/!skip_next_steady_, /*probe=*/false, /*decide=*/false});
  skip_next_steady_ = false;
  ++steady_since_probe_;
}

void ThreadCountChooser::PlanProbe() {
  for (int count : candidates_) {
    if (count == current_) continue;
    planned_.push_back({count, /*timed=*/false, /*probe=*/true, /*decide=*/false});  // plans, a waking team
    for (int i = 0; i < options_.probe_steps; ++i) {
      planned_.push_back({count, /*timed=*/true, /*probe=*/true, /*decide=*/false});
    }
  }
  planned_.back().decide = true;
}

std::optional<std::string> ThreadCountChooser::StepTook(double seconds) {
  DDP_CHECK(!planned_.empty()) << "ThreadCountChooser::StepTook without ThreadsForNextStep";
  const Planned step = planned_.front();
  planned_.pop_front();
  if (step.timed && step.probe) probed_[step.threads].push_back(seconds);
  if (step.timed && !step.probe) {
    recent_.push_back(seconds);
    if (recent_.size() > static_cast<size_t>(options_.probe_steps)) recent_.pop_front();
  }
  return step.decide ? Decide() : std::nullopt;
}

std::optional<std::string> ThreadCountChooser::Decide() {
  const double current_median = Median(std::vector<double>(recent_.begin(), recent_.end()));
  int best = current_;
  double best_median = current_median;
  for (const auto& [count, seconds] : probed_) {
    const double median = Median(seconds);
    if (median < best_median) {
      best = count;
      best_median = median;
    }
  }
  std::optional<std::string> change;
  if (best != current_ && best_median < current_median * (1.0 - options_.margin)) {
    change = absl::StrFormat(
        "adaptive threads: %d -> %d kernel threads (median step %.1f ms at %d, %.1f ms at %d)", current_,
        best, 1e3 * best_median, best, 1e3 * current_median, current_);
    const std::vector<double>& measured = probed_[best];
    recent_.assign(measured.begin(), measured.end());  // the new count's latest steps: the probe's
    current_ = best;
  }
  probed_.clear();
  probed_once_ = true;
  steady_since_probe_ = 0;
  return change;
}

AdaptiveThreads::AdaptiveThreads(const AdaptiveThreadsOptions& options, FILE* log)
    : chooser_(options), log_(log) {}

void AdaptiveThreads::StepBegan() {
  SetNumThreads(chooser_.ThreadsForNextStep());
  began_ = absl::Now();
}

void AdaptiveThreads::StepEnded() {
  const std::optional<std::string> change = chooser_.StepTook(absl::ToDoubleSeconds(absl::Now() - began_));
  if (change && log_ != nullptr) std::fprintf(log_, "%s\n", change->c_str());
}

}  // namespace ddp
