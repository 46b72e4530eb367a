// How a worker process ended, in the words ddprun and Spawn report it: its exit code or signal, its peak
// memory, and whether a SIGKILL came from the kernel's OOM killer.
#ifndef DDP_LAUNCH_WORKER_EXIT_H_
#define DDP_LAUNCH_WORKER_EXIT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "base/memory_cgroup.h"

namespace ddp {

// The kernel's OOM kill counters as they were when the watch started (or last explained a kill), to tell
// whether a worker that died of SIGKILL was the OOM killer's victim. Not thread-safe.
class OomKillWatch {
 public:
  // Reads the counters now.
  explicit OomKillWatch(KernelFiles files = {});

  // For a worker that died of SIGKILL: when the kernel counted OOM kills since the baseline (in this
  // process's memory cgroup, whose descendants the workers are in; on the host when the cgroup's count
  // is unknown), a sentence naming the OOM killer, the limit and what to do; when it counted none, a
  // sentence saying the SIGKILL was sent by a process; "" when it cannot tell. Moves the baseline
  // to now, so each kill is explained once.
  std::string ExplainSigkill();

 private:
  KernelFiles files_;
  MemoryCgroupState baseline_;
};

// How one worker ended.
struct WorkerExit {
  int exit_code = 0;           // shell style: the exit status, or 128 + the signal's number
  bool signaled = false;       // it died of a signal (exit_code - 128 is the signal)
  int64_t peak_rss_bytes = 0;  // its largest resident memory (wait4's ru_maxrss); 0 when unknown
  std::string sigkill_cause;   // OomKillWatch::ExplainSigkill() for a SIGKILL, else ""
};

// "exit code 3"; "exit code 143 (signal 15, SIGTERM; peak RSS 80.2 MiB)"; "exit code 137 (signal 9,
// SIGKILL; peak RSS 1.20 GiB): the kernel's OOM killer ...". Pure.
std::string DescribeWorkerExit(const WorkerExit& exit);

}  // namespace ddp

#endif  // DDP_LAUNCH_WORKER_EXIT_H_
