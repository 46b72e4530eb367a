// Spawn: run n ranks as threads of this process (like torch.multiprocessing.spawn, for tests).
#ifndef DDP_LAUNCH_SPAWN_H_
#define DDP_LAUNCH_SPAWN_H_

#include <functional>

#include "absl/status/status.h"

namespace ddp {

// Runs fn(0) ... fn(n-1) on n threads, waits for all of them, and returns OK or the first error to
// happen (by time), its message prefixed with "rank R: ". An exception escaping fn counts as a
// kInternal error of that rank. Ranks that block on a failed peer must use timeouts (every Store and
// ProcessGroup call has one): Spawn waits for every thread.
// REQUIRES: n >= 1. Thread safety: fn is called concurrently from n threads.
absl::Status Spawn(int n, const std::function<absl::Status(int rank)>& fn);

}  // namespace ddp

#endif  // DDP_LAUNCH_SPAWN_H_
