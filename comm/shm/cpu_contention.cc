#include "comm/shm/cpu_contention.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "base/check.h"

namespace ddp {
namespace {

// The runnable count in /proc/loadavg ("0.40 0.22 0.09 2/152 4128": the 2), read through a descriptor
// kept open for the process's life (a pread regenerates the text: about a microsecond). Unknown for a
// thread under a real-time policy (chrt -f): the ordinary threads that make up the count cannot preempt
// it, nor the peers it waits for, which run under the same policy.
std::optional<int> ReadLoadavgRunnable() {
  const int policy = sched_getscheduler(0);
  if (policy == SCHED_FIFO || policy == SCHED_RR) return std::nullopt;
  static const int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buffer[128];
  const ssize_t n = pread(fd, buffer, sizeof(buffer) - 1, 0);
  if (n <= 0) return std::nullopt;
  absl::string_view text(buffer, static_cast<size_t>(n));
  for (int field = 0; field < 3; ++field) {
    const size_t space = text.find(' ');
    if (space == absl::string_view::npos) return std::nullopt;
    text.remove_prefix(space + 1);
  }
  int runnable = 0;
  if (!absl::SimpleAtoi(text.substr(0, text.find('/')), &runnable)) return std::nullopt;
  return runnable;
}

}  // namespace

void RunnableEstimate::Add(int runnable) {
  mean_ = samples_ == 0 ? runnable : mean_ + (runnable - mean_) / 4;
  ++samples_;
}

CpuContention::CpuContention(int cpus, RunnableReader reader, Options options)
    : reader_(std::move(reader)),
      interval_ns_(absl::ToInt64Nanoseconds(options.sample_interval)),
      estimate_(cpus) {
  DDP_CHECK(cpus >= 1) << "CpuContention over " << cpus << " CPUs";
}

// The host-wide count is compared with the CPUs this process may use: when those are fewer than the
// host's (an affinity mask, a CPU quota), threads elsewhere on the host count as if they competed for
// ours, which errs towards sleeping (a slower wait) rather than towards spinning (a starved peer).
CpuContention& CpuContention::ForProcess() {
  static CpuContention* const contention = new CpuContention(UsableCpus(), ReadLoadavgRunnable);
  return *contention;
}

bool CpuContention::Sample(absl::Time now) {
  const int64_t now_ns = absl::ToUnixNanos(now);
  if (now_ns >= next_sample_ns_.load(std::memory_order_relaxed) &&
      !sampling_.exchange(true, std::memory_order_acquire)) {
    if (now_ns >= next_sample_ns_.load(std::memory_order_relaxed)) {  // not taken meanwhile by another thread
      next_sample_ns_.store(now_ns + interval_ns_, std::memory_order_relaxed);
      if (const std::optional<int> runnable = reader_()) {
        estimate_.Add(*runnable);
        oversubscribed_.store(estimate_.oversubscribed(), std::memory_order_relaxed);
        samples_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    sampling_.store(false, std::memory_order_release);
  }
  return oversubscribed();
}

}  // namespace ddp
