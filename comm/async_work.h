// A Work completed from another thread (backends' worker threads), with a bounded host wait.
#ifndef DDP_COMM_ASYNC_WORK_H_
#define DDP_COMM_ASYNC_WORK_H_

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/process_group.h"

namespace ddp {

// Thread-safe. The backend calls MarkStarted() then Complete(status) exactly once; any thread may Wait.
// IsCompleted() and Wait() on a completed Work take no lock (Note [Completed without a lock]).
class AsyncWork : public Work {
 public:
  // `description` (e.g. "AllReduce #12 of 1024 float32 on rank 1/4 (gloo)") is used in timeout errors.
  explicit AsyncWork(std::string description) : description_(std::move(description)) {}

  bool IsCompleted() override;
  absl::Status Wait(absl::Duration timeout) override;
  double ExecutionSeconds() const override;
  absl::Time StartTime() const override;
  absl::Time EndTime() const override;
  // Supported: `callback` runs inside Complete() (after waiters are woken, no lock held), or at once if
  // already completed.
  bool AddCompletionCallback(std::function<void(const absl::Status&)> callback) override;

  // Records that the backend began executing the operation.
  void MarkStarted();
  // When the operation has completed: true, with its final status and start and end times, read
  // without the lock (Note [Completed without a lock]); false, touching nothing, while it runs. For
  // observers that look at many Works on a hot path (the flight recorder, comm/flight_recorder.h).
  bool CompletedOutcome(absl::Status* status, absl::Time* started, absl::Time* ended) const
      ABSL_NO_THREAD_SAFETY_ANALYSIS;

  // Records the outcome and wakes every waiter. Later calls are ignored. `started`, when given, is when
  // the backend began (one locked section instead of MarkStarted's; a MarkStarted time is kept).
  void Complete(absl::Status status, absl::Time started = absl::InfinitePast());
  // The description given at construction; a subclass may format it lazily instead (only errors and
  // callers that ask need it, and a small collective should not pay for formatting it).
  virtual std::string description() const { return description_; }

 private:
  const std::string description_;
  mutable absl::Mutex mu_;
  // Whether Complete ran. Written only under mu_, last in Complete (release), after status_ and the times
  // got their final values; they never change again, so a thread that reads done_ (acquire) as true may
  // read status_ without mu_.
  std::atomic<bool> done_{false};
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  absl::Time started_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time ended_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::vector<std::function<void(const absl::Status&)>> callbacks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddp

#endif  // DDP_COMM_ASYNC_WORK_H_
