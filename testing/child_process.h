// Test-only: runs a step of a test in a forked child, for failures that need process-wide set-up
// (a file size limit, a private mount namespace) which must not leak into the test process.
#ifndef DDP_TESTING_CHILD_PROCESS_H_
#define DDP_TESTING_CHILD_PROCESS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"

namespace ddp {

// How RunInChild's child ended.
struct ChildRun {
  bool skipped = false;  // `set_up` said the environment does not allow it; status's message says why
  absl::Status status;   // what `body` returned in the child (code and message); Unknown if it crashed
};

// Forks; the child runs `set_up` (a non-empty return value is why it cannot: the run is skipped), then
// `body`, and reports body's status back. Waits for the child. Call only from the test's main thread
// while no other thread runs (fork copies just the calling thread).
ChildRun RunInChild(const std::function<std::string()>& set_up, const std::function<absl::Status()>& body);

// Set-ups for RunInChild. Each returns "" on success, else why it could not.
//
// Writes past `bytes` in a file fail with EFBIG ("File too large") instead of killing the process:
// a full disk, simulated (RLIMIT_FSIZE; works as root).
std::string LimitFileSize(int64_t bytes);
// Makes `dir` read-only: as root (which ignores permissions), a read-only bind mount in a private mount
// namespace ("Read-only file system"); otherwise chmod 0500 ("Permission denied"), which outlives the
// child: restore it afterwards with chmod(dir, 0755).
std::string MakeDirectoryReadOnly(const std::string& dir);

}  // namespace ddp

#endif  // DDP_TESTING_CHILD_PROCESS_H_
