// What ddprun (launch/launcher.h) and Spawn (launch/spawn.h) both do around a worker group: forward
// SIGINT/SIGTERM to the workers, and record in the store how the first failed worker ended, so the
// survivors' errors name it (Note [Failure reports] in comm/failure_reports.h).
#ifndef DDP_LAUNCH_JOB_CONTROL_H_
#define DDP_LAUNCH_JOB_CONTROL_H_

#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "launch/worker_env.h"
#include "store/tcp_store_client.h"

namespace ddp {

// While alive, `signals` (default SIGINT and SIGTERM) sent to this process become one byte each (the signal number) on a
// pipe, whose read end goes to WorkerGroupConfig::signal_fd (the worker group forwards them to every
// worker), and SIGPIPE is ignored; the destructor restores the previous dispositions. One at a time per
// process (the handler writes to a process-wide descriptor); not thread-safe.
class ScopedSignalPipe {
 public:
  explicit ScopedSignalPipe(std::vector<int> signals = {SIGINT, SIGTERM});
  ~ScopedSignalPipe();
  ScopedSignalPipe(const ScopedSignalPipe&) = delete;
  ScopedSignalPipe& operator=(const ScopedSignalPipe&) = delete;

  // The non-blocking read end (owned by this object).
  int read_fd() const { return read_.get(); }

 private:
  UniqueFd read_, write_;
  const std::vector<int> signals_;
  std::vector<struct sigaction> old_actions_;
  struct sigaction old_pipe_;
};

// A short-lived client of `layout`'s job store (its store address, else the master address). The 2 s
// defaults suit the launcher's best-effort notes to the workers.
absl::StatusOr<std::unique_ptr<TcpStoreClient>> ConnectJobStore(const JobLayout& layout,
                                                                absl::Duration connect_timeout = absl::Seconds(2),
                                                                absl::Duration io_timeout = absl::Seconds(2));

// Writes how worker `rank` ended (`how`: DescribeWorkerExit's "exit code 1", "exit code 137 (signal 9,
// SIGKILL; ...)") into the store namespace of attempt `restart` of `layout`'s job
// (store/store_keys.h: LauncherExitNoticeKey), so the survivors' failure reports name it at once. Best
// effort, bounded by 2 s connect and I/O timeouts: a notice that cannot be written only makes the
// survivors wait for their report window.
void RecordExitNotice(const JobLayout& layout, int restart, int rank, const std::string& how);

}  // namespace ddp

#endif  // DDP_LAUNCH_JOB_CONTROL_H_
