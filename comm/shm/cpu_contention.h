// CpuContention: whether more threads want this host's CPUs than there are CPUs, as the shared-memory
// waits need to know before they spin (Note [Spinning under contention] in comm/shm/shm_channel.cc): a
// rank that spins while the peer it waits for has no CPU keeps that peer from running.
#ifndef DDP_COMM_SHM_CPU_CONTENTION_H_
#define DDP_COMM_SHM_CPU_CONTENTION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>

#include "absl/time/time.h"
#include "base/usable_cpus.h"

namespace ddp {

// Pure: the smoothed count of runnable threads (running or waiting for a CPU) on `cpus` CPUs, from
// instantaneous samples. The first sample sets the mean; each later one moves it a quarter of the way
// (an exponential moving average), so a burst of one sample does not flip the verdict but load that
// stays does within three samples. Not thread-safe.
class RunnableEstimate {
 public:
  // REQUIRES: cpus >= 1.
  explicit RunnableEstimate(int cpus) : cpus_(cpus) {}
  // Adds a sample of how many threads were runnable at once.
  void Add(int runnable);
  // Whether the mean exceeds the CPUs by more than half a thread; false before the first sample.
  bool oversubscribed() const { return samples_ > 0 && mean_ > cpus_ + 0.5; }
  double mean() const { return mean_; }

 private:
  const int cpus_;
  double mean_ = 0;
  uint64_t samples_ = 0;
};

// A RunnableEstimate fed, at most once per sample interval, by whichever thread asks first. Thread-safe
// and lock-free: a thread that finds another one sampling goes on with the latest verdict.
class CpuContention {
 public:
  // How many threads are runnable right now on the CPUs the instance counts; nullopt when unknown (the
  // sample is skipped).
  using RunnableReader = std::function<std::optional<int>()>;

  struct Options {
    // At most one sample per interval (a sample reads /proc/loadavg: about a microsecond).
    absl::Duration sample_interval = absl::Milliseconds(1);
  };

  // Samples `reader` against `cpus` CPUs (>= 1).
  CpuContention(int cpus, RunnableReader reader, Options options);
  CpuContention(int cpus, RunnableReader reader) : CpuContention(cpus, std::move(reader), Options()) {}
  CpuContention(const CpuContention&) = delete;
  CpuContention& operator=(const CpuContention&) = delete;

  // The instance of this process: /proc/loadavg's count of runnable threads (the whole host's) against
  // UsableCpus(). Never destroyed. Samples taken by a thread under a real-time policy are skipped (the
  // count's ordinary threads cannot take its CPU); when /proc/loadavg cannot be read it never reports
  // oversubscription.
  static CpuContention& ForProcess();

  // Takes a sample when the last one is at least options.sample_interval older than `now` (WallNow())
  // and no other thread is taking one, then returns oversubscribed(). Samples mean something only when
  // the caller knows what its own process contributes to the count (Note [Spinning under contention]).
  bool Sample(absl::Time now);
  // The verdict of the samples so far, without sampling.
  bool oversubscribed() const { return oversubscribed_.load(std::memory_order_relaxed); }
  // How many samples were taken (tests, diagnostics).
  uint64_t samples() const { return samples_.load(std::memory_order_relaxed); }

 private:
  const RunnableReader reader_;
  const int64_t interval_ns_;
  std::atomic<int64_t> next_sample_ns_{0};  // absl::ToUnixNanos of the earliest next sample
  std::atomic<bool> sampling_{false};       // a thread is taking a sample (and owns estimate_)
  RunnableEstimate estimate_;               // written only by the thread that set sampling_
  std::atomic<bool> oversubscribed_{false};
  std::atomic<uint64_t> samples_{0};
};

}  // namespace ddp

#endif  // DDP_COMM_SHM_CPU_CONTENTION_H_
