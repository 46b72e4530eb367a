#include "comm/shm/cpu_contention.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/check.h"

namespace ddp {
namespace {

// The first line of `path`, "" when it cannot be read.
std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// CPUs allowed by the affinity mask; 0 when unknown.
int AffinityCpus() {
  constexpr int kMaxCpus = 4096;
  cpu_set_t* set = CPU_ALLOC(kMaxCpus);
  if (set == nullptr) return 0;
  const size_t bytes = CPU_ALLOC_SIZE(kMaxCpus);
  CPU_ZERO_S(bytes, set);
  const int count = sched_getaffinity(0, bytes, set) == 0 ? CPU_COUNT_S(bytes, set) : 0;
  CPU_FREE(set);
  return count;
}

// The cgroup's CPU quota in CPUs (quota / period), or 0 when none is set or it cannot be read: cgroup v2
// (cpu.max, "max 100000" or "200000 100000") of this process's cgroup, else cgroup v1's cfs files.
double QuotaCpus() {
  std::string cgroup;  // the v2 path, from the "0::<path>" line of /proc/self/cgroup
  std::ifstream lines("/proc/self/cgroup");
  for (std::string line; std::getline(lines, line);) {
    if (absl::StartsWith(line, "0::")) cgroup = line.substr(3);
  }
  for (const std::string& path : {"/sys/fs/cgroup" + cgroup + "/cpu.max", std::string("/sys/fs/cgroup/cpu.max")}) {
    std::vector<std::string> fields = absl::StrSplit(FirstLine(path), ' ', absl::SkipEmpty());
    double quota = 0, period = 0;
    if (fields.size() == 2 && absl::SimpleAtod(fields[0], &quota) && absl::SimpleAtod(fields[1], &period) &&
        quota > 0 && period > 0) {
      return quota / period;
    }
    if (fields.size() == 2 && fields[0] == "max") return 0;
  }
  double quota = 0, period = 0;
  if (absl::SimpleAtod(FirstLine("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), &quota) &&
      absl::SimpleAtod(FirstLine("/sys/fs/cgroup/cpu/cpu.cfs_period_us"), &period) && quota > 0 && period > 0) {
    return quota / period;
  }
  return 0;
}

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

int UsableCpus() {
  int cpus = AffinityCpus();
  if (cpus <= 0) cpus = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  const double quota = QuotaCpus();
  if (quota > 0) cpus = std::min(cpus, static_cast<int>(std::ceil(quota)));
  return std::max(1, cpus);
}

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
