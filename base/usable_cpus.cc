#include "base/usable_cpus.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace ddp {
namespace {

// The first line of `path`, "" when it cannot be read.
std::string FirstLine(const std::string& path) {
  const std::vector<std::string> lines = KernelFileLines(path);
  return lines.empty() ? "" : lines[0];
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

// The quota set in one cgroup directory, in CPUs; 0 for none.
double QuotaIn(const std::string& dir, bool v2) {
  double quota = 0, period = 0;
  if (v2) {  // "max 100000" or "200000 100000"
    const std::vector<std::string> fields =
        absl::StrSplit(FirstLine(dir + "/cpu.max"), ' ', absl::SkipEmpty());
    if (fields.size() == 2 && absl::SimpleAtod(fields[0], &quota) && absl::SimpleAtod(fields[1], &period) &&
        quota > 0 && period > 0) {
      return quota / period;
    }
    return 0;
  }
  if (absl::SimpleAtod(FirstLine(dir + "/cpu.cfs_quota_us"), &quota) &&
      absl::SimpleAtod(FirstLine(dir + "/cpu.cfs_period_us"), &period) && quota > 0 && period > 0) {
    return quota / period;
  }
  return 0;
}

}  // namespace

double CgroupCpuQuota(const KernelFiles& files) {
  const std::optional<CgroupDir> dir = FindCgroupDir("cpu", files);
  if (!dir.has_value()) return 0;
  double smallest = 0;
  for (const std::string& up : dir->UpToMountPoint()) {
    const double quota = QuotaIn(up, dir->v2);
    if (quota > 0 && (smallest == 0 || quota < smallest)) smallest = quota;
  }
  return smallest;
}

int UsableCpus() {
  int cpus = AffinityCpus();
  if (cpus <= 0) cpus = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  const double quota = CgroupCpuQuota();
  if (quota > 0) cpus = std::min(cpus, static_cast<int>(std::ceil(quota)));
  return std::max(1, cpus);
}

}  // namespace ddp
