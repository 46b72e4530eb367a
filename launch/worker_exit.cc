#include "launch/worker_exit.h"

#include <string.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/describe_bytes.h"

namespace ddp {
namespace {

// "1 process", "3 processes".
std::string Processes(int64_t n) { return absl::StrCat(n, n == 1 ? " process" : " processes"); }

// How much a counter grew from `before` to `now`; nullopt when either reading is unknown.
std::optional<int64_t> Grown(const std::optional<int64_t>& before, const std::optional<int64_t>& now) {
  if (!before.has_value() || !now.has_value()) return std::nullopt;
  return *now - *before;
}

constexpr char kWhatToDo[] = "; a smaller batch, fewer workers per node or more memory avoids it";

}  // namespace

OomKillWatch::OomKillWatch(KernelFiles files)
    : files_(std::move(files)), baseline_(ReadMemoryCgroupState(files_)) {}

std::string OomKillWatch::ExplainSigkill() {
  const MemoryCgroupState now = ReadMemoryCgroupState(files_);
  const MemoryCgroupState before = std::exchange(baseline_, now);
  const std::optional<int64_t> in_cgroup = Grown(before.cgroup_oom_kills, now.cgroup_oom_kills);
  const std::optional<int64_t> on_host = Grown(before.host_oom_kills, now.host_oom_kills);
  if (in_cgroup.value_or(0) > 0) {
    if (now.limit_bytes.has_value()) {
      return absl::StrCat("the kernel's OOM killer killed ", Processes(*in_cgroup),
                          " of this job's memory cgroup (", now.cgroup_dir,
                          ") while it ran: its workers needed more than the cgroup's limit of ",
                          DescribeBytes(*now.limit_bytes), kWhatToDo);
    }
    return absl::StrCat("the kernel's OOM killer killed ", Processes(*in_cgroup), " of this job's cgroup (",
                        now.cgroup_dir, ") while it ran: the host ran out of memory", kWhatToDo);
  }
  // A root cgroup counts no kills, and without a cgroup count only the host's is left.
  const bool host_decides = !in_cgroup.has_value() || now.cgroup_is_mount_point;
  if (host_decides && on_host.value_or(0) > 0) {
    return absl::StrCat("the kernel's OOM killer killed ", Processes(*on_host),
                        " on this host while the job ran",
                        now.host_memory_bytes.has_value()
                            ? absl::StrCat(": the host's ", DescribeBytes(*now.host_memory_bytes), " ran out")
                            : std::string(),
                        kWhatToDo);
  }
  if (in_cgroup.has_value() || on_host.has_value()) {
    return "the kernel's OOM killer killed nothing meanwhile, so the SIGKILL was sent (kill -9, a job "
           "scheduler, the worker itself)";
  }
  return "";
}

std::string DescribeWorkerExit(const WorkerExit& exit) {
  std::string how = absl::StrCat("exit code ", exit.exit_code);
  if (!exit.signaled) return how;
  const int signal = exit.exit_code - 128;
  const char* abbreviation = sigabbrev_np(signal);
  absl::StrAppend(
      &how, " (signal ", signal, abbreviation != nullptr ? absl::StrCat(", SIG", abbreviation) : "",
      exit.peak_rss_bytes > 0 ? absl::StrCat("; peak RSS ", DescribeBytes(exit.peak_rss_bytes)) : "", ")");
  if (!exit.sigkill_cause.empty()) absl::StrAppend(&how, ": ", exit.sigkill_cause);
  return how;
}

}  // namespace ddp
