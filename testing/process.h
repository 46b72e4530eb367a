// Helpers for tests that run real programs: runfile and scratch paths, running a program with a
// deadline while capturing its output, and watching programs in the background (their children, their
// memory, their ports).
#ifndef DDP_TESTING_PROCESS_H_
#define DDP_TESTING_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace ddp {

// The path of a data dependency (e.g. "launch/ddprun") under Bazel's runfiles tree; `path` itself outside
// Bazel (run from the runfiles root).
std::string Runfile(const std::string& path);

// `name` inside the test's scratch directory ($TEST_TMPDIR, else /tmp).
std::string TempPath(const std::string& name);

// What a finished program did.
struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal number when killed by a signal
  std::string out, err;
  absl::Duration elapsed;
  std::string all() const { return out + err; }
};

// Options of RunProcess.
struct RunOptions {
  std::vector<std::string> env;            // extra NAME=value variables for the child
  absl::Duration timeout = absl::Seconds(60);  // SIGKILL the child and fail the test after this long
  int signal = 0;                          // when not 0, sent to the child after `signal_after`
  absl::Duration signal_after = absl::ZeroDuration();
};

// Runs argv[0] (a path) with `argv`, capturing stdout and stderr separately. A child still running at
// options.timeout is SIGKILLed and the current test fails (a hang is a bug); the child also dies with the
// calling thread (PR_SET_PDEATHSIG), so a killed test leaves no process behind. REQUIRES: !argv.empty().
ProcessResult RunProcess(const std::vector<std::string>& argv, const RunOptions& options = {});

// Runs `command` with /bin/sh -c, stderr merged into stdout (returned in `out`), under RunProcess's
// timeout.
ProcessResult RunShell(const std::string& command, absl::Duration timeout = absl::Seconds(300));

// The same, appending the output to `*output` and returning the exit code.
int RunShell(const std::string& command, std::string* output);

// A program running in the background while the test watches it: stdout and stderr go to one file.
// The child dies with the thread that started it (PR_SET_PDEATHSIG). Destroying the object SIGKILLs the
// child if it still runs and reaps it. Not thread-safe.
class BackgroundProcess {
 public:
  // Starts argv[0] (a path) with `argv` and the extra NAME=value variables `env`, its output appended to
  // `output_path`. Fails the current test (and returns null) when it cannot start.
  static std::unique_ptr<BackgroundProcess> Start(const std::vector<std::string>& argv,
                                                  const std::vector<std::string>& env, const std::string& output_path);
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  // What it wrote so far.
  std::string Output() const;
  // Sends `signal` (no-op once reaped).
  void Signal(int signal);
  // Waits up to `timeout` for it to exit; returns its exit code (128 + signal number when killed by a
  // signal), or nullopt while it still runs.
  std::optional<int> Wait(absl::Duration timeout);

 private:
  BackgroundProcess(pid_t pid, std::string output_path) : pid_(pid), output_path_(std::move(output_path)) {}

  const pid_t pid_;
  const std::string output_path_;
  std::optional<int> exit_code_;
};

// Makes this process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER), so that a test can
// watch and reap the workers of a launcher it killed. Returns false when the kernel refuses.
bool BecomeChildSubreaper();

// The ids of `pid`'s children now (from /proc/<pid>/task/*/children).
std::vector<pid_t> ChildrenOf(pid_t pid);

// True when process `pid` has ended (gone, or a zombie not yet reaped).
bool ProcessEnded(pid_t pid);

// SIGKILLs `pid` if it still runs and reaps it when it is this process's child.
void KillAndReap(pid_t pid);

// VmHWM (peak resident memory) and VmRSS of process `pid` in bytes, from /proc/<pid>/status; -1 when
// unreadable.
int64_t PeakRssBytes(pid_t pid);
int64_t RssBytes(pid_t pid);

// Whether something accepts TCP connections on 127.0.0.1:`port` now.
bool AcceptsConnections(int port);

// A TCP port free on 127.0.0.1 now (another process may take it before it is used).
int FreeTcpPort();

}  // namespace ddp

#endif  // DDP_TESTING_PROCESS_H_
