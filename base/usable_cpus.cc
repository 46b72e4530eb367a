#include "base/usable_cpus.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

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
  for (const std::string& path :
       {"/sys/fs/cgroup" + cgroup + "/cpu.max", std::string("/sys/fs/cgroup/cpu.max")}) {
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
      absl::SimpleAtod(FirstLine("/sys/fs/cgroup/cpu/cpu.cfs_period_us"), &period) && quota > 0 &&
      period > 0) {
    return quota / period;
  }
  return 0;
}

}  // namespace

int UsableCpus() {
  int cpus = AffinityCpus();
  if (cpus <= 0) cpus = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  const double quota = QuotaCpus();
  if (quota > 0) cpus = std::min(cpus, static_cast<int>(std::ceil(quota)));
  return std::max(1, cpus);
}

}  // namespace ddp
