// WorkerProcess: one worker started by ddprun — fork/exec in its own process group, with its stdout
// and stderr on pipes.
#ifndef DDP_LAUNCH_WORKER_PROCESS_H_
#define DDP_LAUNCH_WORKER_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace ddp {

// A running (or exited) child process. Destroying it does not kill the child: the launcher decides.
// The child dies with the thread that started it (SIGKILL through PR_SET_PDEATHSIG, which survives
// exec): workers never outlive a launcher that was killed (Note [Workers die with their launcher] in
// worker_process.cc). Processes the child starts itself are its own business; a wrapper script should
// `exec` the real program. Not thread-safe; Start from a thread that lives as long as the child should.
class WorkerProcess {
 public:
  // Starts `argv` (argv[0] searched in PATH) with this process's environment overridden by `env`,
  // stdin from /dev/null, stdout and stderr on pipes (read ends non-blocking). The child leads its
  // own process group, so signals reach whatever it starts. When exec fails the child writes the
  // reason on its stderr and exits with 127.
  // REQUIRES: argv is not empty.
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Start(
      const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);

  pid_t pid() const { return pid_; }
  // Read ends of the pipes (-1 once closed with CloseStdout/CloseStderr).
  int stdout_fd() const { return stdout_.get(); }
  int stderr_fd() const { return stderr_.get(); }
  void CloseStdout() { stdout_.Reset(); }
  void CloseStderr() { stderr_.Reset(); }

  // Sends `signal` to the worker's process group (no-op once it has been reaped).
  void Signal(int signal);
  // Reaps the child if it has exited; returns its wait status (see ExitCodeFromWaitStatus), or
  // nullopt while it runs. After a status has been returned, returns it again.
  std::optional<int> TryReap();
  // Once reaped: the child's largest resident memory, in bytes (its rusage's ru_maxrss); 0 before.
  int64_t peak_rss_bytes() const { return peak_rss_bytes_; }

 private:
  WorkerProcess(pid_t pid, UniqueFd stdout_fd, UniqueFd stderr_fd);

  const pid_t pid_;
  UniqueFd stdout_, stderr_;
  std::optional<int> wait_status_;
  int64_t peak_rss_bytes_ = 0;
};

// Maps a waitpid status to a shell-style exit code: the exit status, or 128 + signal number.
int ExitCodeFromWaitStatus(int wait_status);

}  // namespace ddp

#endif  // DDP_LAUNCH_WORKER_PROCESS_H_
