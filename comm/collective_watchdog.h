// CollectiveWatchdog: the host-side timeout of a backend whose collectives complete on a device
// (NCCL), as PyTorch's NCCL watchdog. Note [Collective watchdog]: a collective issued on a stream
// returns at once and its Work may only ever be waited on by the stream (WaitStream), so without a
// watchdog a hung peer blocks every later kernel with no message. The watchdog's thread polls each
// in-flight collective's completion and the communicator's asynchronous error every poll_interval;
// when a collective is not done within the timeout, or an asynchronous error appears, it aborts the
// communicator once (pending device work returns), marks the group failed and fails every in-flight
// collective with an error naming the collective (its description says which and on which rank).
// Later collectives see health() and fail at once.
//
// Nothing here knows CUDA: completion, the asynchronous error and the abort are callbacks, so the logic
// is tested on the CPU with a fake (comm/collective_watchdog_test.cc).
// Thread safety: every method may be called from any thread.
#ifndef DDP_COMM_COLLECTIVE_WATCHDOG_H_
#define DDP_COMM_COLLECTIVE_WATCHDOG_H_

#include <functional>
#include <list>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ddp {

struct CollectiveWatchdogOptions {
  absl::Duration timeout = absl::Seconds(300);            // the group's timeout
  absl::Duration poll_interval = absl::Milliseconds(100);  // how often completion is polled
};

// What the watchdog asks of the communicator. All three are called on the watchdog's thread.
struct CommunicatorProbe {
  std::function<absl::Status()> async_error;  // OK, or the communicator's asynchronous error
  std::function<void()> abort;                // aborts the communicator (called at most once)
};

class CollectiveWatchdog {
 public:
  // Starts the polling thread. `group` (e.g. "rank 1/4 (nccl)") prefixes the group failure.
  CollectiveWatchdog(std::string group, CommunicatorProbe probe, CollectiveWatchdogOptions options = {});
  // Stops and joins the thread; in-flight collectives are no longer watched.
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Watches one issued collective until `is_done()` returns true. `description` names it (e.g.
  // "AllReduce #12 of 1024 float32 on rank 1/4 (nccl)"); `on_failure` receives the error when the
  // watchdog fails it. Both callbacks run on the watchdog's thread and must not call back into it.
  // When the group has already failed, `on_failure` runs at once on the caller's thread instead.
  void Watch(std::string description, std::function<bool()> is_done,
             std::function<void(const absl::Status&)> on_failure);

  // OK while the group is healthy; after a timeout or an asynchronous error, that failure.
  absl::Status health() const;
  // How many collectives are being watched (for tests and statistics).
  int in_flight() const;

 private:
  struct Entry {
    std::string description;
    absl::Time issued;
    std::function<bool()> is_done;
    std::function<void(const absl::Status&)> on_failure;
  };

  void Run();
  // One poll: drops completed entries; on expiry or an asynchronous error, fails the group.
  void Poll();
  void FailGroup(absl::Status failure);

  const std::string group_;
  const CommunicatorProbe probe_;
  const CollectiveWatchdogOptions options_;
  mutable absl::Mutex mu_;
  std::list<Entry> entries_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ddp

#endif  // DDP_COMM_COLLECTIVE_WATCHDOG_H_
