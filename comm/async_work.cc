#include "comm/async_work.h"

#include "absl/strings/str_cat.h"
#include "base/wall_clock.h"

namespace ddp {

// Note [Completed without a lock]
// A caller that waits for a finished collective (the common case for small ones, which complete inline) would
// otherwise take the mutex twice, IsCompleted and Wait. Instead, Complete() sets done_ (release) after the
// final status_ is stored, and status_ never changes again, so a reader that sees done_ (acquire) reads
// status_ without the lock. done_ is written only under the lock, so a thread that holds it reads done_
// relaxed.

bool AsyncWork::IsCompleted() { return done_.load(std::memory_order_acquire); }

absl::Status AsyncWork::Wait(absl::Duration timeout) {
  if (done_.load(std::memory_order_acquire)) return status_;  // Note [Completed without a lock]
  absl::MutexLock lock(&mu_);
  // Completed since the check above: no AwaitWithTimeout, which reads the clock for its deadline.
  if (done_.load(std::memory_order_relaxed)) return status_;
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_.load(std::memory_order_relaxed); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat(description(), ": not completed after ", absl::FormatDuration(timeout)));
  }
  return status_;
}

// The status and times are final once done_ is set (Note [Completed without a lock]).
bool AsyncWork::CompletedOutcome(absl::Status* status, absl::Time* started, absl::Time* ended) const {
  if (!done_.load(std::memory_order_acquire)) return false;
  *status = status_;
  *started = started_;
  *ended = ended_;
  return true;
}

double AsyncWork::ExecutionSeconds() const {
  absl::MutexLock lock(&mu_);
  if (started_ == absl::InfinitePast() || ended_ == absl::InfinitePast()) return 0.0;
  return absl::ToDoubleSeconds(ended_ - started_);
}

absl::Time AsyncWork::StartTime() const {
  absl::MutexLock lock(&mu_);
  return started_;
}

absl::Time AsyncWork::EndTime() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

void AsyncWork::MarkStarted() {
  absl::MutexLock lock(&mu_);
  started_ = WallNow();
}

void AsyncWork::Complete(absl::Status status, absl::Time started) {
  std::vector<std::function<void(const absl::Status&)>> callbacks;
  absl::Status outcome;
  {
    absl::MutexLock lock(&mu_);
    if (done_.load(std::memory_order_relaxed)) return;
    status_ = std::move(status);
    ended_ = WallNow();
    if (started_ == absl::InfinitePast()) started_ = started != absl::InfinitePast() ? started : ended_;
    done_.store(true, std::memory_order_release);  // last: the status and times are final
    callbacks.swap(callbacks_);
    outcome = status_;
  }
  // Outside the lock: a callback may issue new collectives or query this Work.
  for (auto& callback : callbacks) callback(outcome);
}

bool AsyncWork::AddCompletionCallback(std::function<void(const absl::Status&)> callback) {
  absl::Status outcome;
  {
    absl::MutexLock lock(&mu_);
    if (!done_.load(std::memory_order_relaxed)) {
      callbacks_.push_back(std::move(callback));
      return true;
    }
    outcome = status_;
  }
  callback(outcome);
  return true;
}

}  // namespace ddp
