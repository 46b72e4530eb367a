// Helpers for tests that run real programs: runfile and scratch paths, and running a program with a
// deadline while capturing its output.
#ifndef DDP_TESTING_PROCESS_H_
#define DDP_TESTING_PROCESS_H_

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
// options.timeout is SIGKILLed and the current test fails (a hang is a bug). REQUIRES: !argv.empty().
ProcessResult RunProcess(const std::vector<std::string>& argv, const RunOptions& options = {});

// Runs `command` with /bin/sh -c, stderr merged into stdout (returned in `out`), under RunProcess's
// timeout.
ProcessResult RunShell(const std::string& command, absl::Duration timeout = absl::Seconds(300));

// The same, appending the output to `*output` and returning the exit code.
int RunShell(const std::string& command, std::string* output);

}  // namespace ddp

#endif  // DDP_TESTING_PROCESS_H_
