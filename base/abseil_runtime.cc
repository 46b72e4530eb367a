// Process-wide Abseil settings for optimised builds, applied before main() in every binary that links
// //base:check (every binary of this repository). See Note [Mutex deadlock detection].

#include "absl/synchronization/mutex.h"

// Note [Mutex deadlock detection]
// Debian builds libabsl without NDEBUG, so its absl::Mutex runs deadlock detection on every Lock and
// Unlock: each mutex gets a node in a process-wide lock-order graph, updated under a global spin lock
// (perf shows GraphCycles::GetId and RemoveNode on the hot path of a small all-reduce). That costs
// about 0.3-0.4 us per shared-memory all-reduce of 4 B-64 KiB (bench/backend_allreduce_bench) and
// something on every mutex of the training loop. Our optimised builds (-c opt defines NDEBUG) therefore
// turn it off at start-up; debug builds (--config=asan is -c dbg) keep it, so the sanitizer runs still
// report lock-order inversions.

namespace ddp {
namespace {

#ifdef NDEBUG
const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();
#endif

}  // namespace
}  // namespace ddp
