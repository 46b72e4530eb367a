// A test's bounded wait for an observable condition, instead of a sleep that orders threads (a sleep
// fails on a busy machine; a condition either holds or the wait times out with a clear failure).
#ifndef DDP_TESTING_WAIT_UNTIL_H_
#define DDP_TESTING_WAIT_UNTIL_H_

#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ddp {

// Polls `condition` about every millisecond until it holds or `timeout` passes. Returns whether it held.
inline bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout = absl::Seconds(30)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

}  // namespace ddp

#endif  // DDP_TESTING_WAIT_UNTIL_H_
