// The wall clock for hot paths (Note [A cheaper absl::Now]).
#ifndef DDP_BASE_WALL_CLOCK_H_
#define DDP_BASE_WALL_CLOCK_H_

#include <ctime>

#include "absl/time/time.h"

namespace ddp {

// Note [A cheaper absl::Now]
// absl::Now() of Debian's Abseil takes about 50 ns on this machine kind, clock_gettime(CLOCK_REALTIME) (the
// vDSO, TSC clock source) about 22 ns (a loop of 10^7 calls each, pinned to one core). A 4-byte shared-memory
// all-reduce reads the clock twice (its Work's start and end) and takes well under a microsecond in all
// (BENCHMARKS.md, section All-reduce at world 2 and zero-copy buckets), so the paths that run once per
// collective read it here instead, as do the shared-memory waits, which read it every 64 pauses while they
// spin (comm/shm/shm_channel.cc). Same clock, same absl::Time: the values mix freely with absl::Now()'s.

// The current wall-clock time, as absl::Now() would give it.
inline absl::Time WallNow() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return absl::TimeFromTimespec(now);
}

}  // namespace ddp

#endif  // DDP_BASE_WALL_CLOCK_H_
