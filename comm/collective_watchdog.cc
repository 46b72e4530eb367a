#include "comm/collective_watchdog.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ddp {

CollectiveWatchdog::CollectiveWatchdog(std::string group, CommunicatorProbe probe, CollectiveWatchdogOptions options)
    : group_(std::move(group)), probe_(std::move(probe)), options_(options) {
  thread_ = std::thread([this] { Run(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void CollectiveWatchdog::Watch(std::string description, std::function<bool()> is_done,
                               std::function<void(const absl::Status&)> on_failure) {
  absl::Status failed;
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) {
      entries_.push_back(Entry{std::move(description), absl::Now(), std::move(is_done), std::move(on_failure)});
      return;
    }
    failed = failure_;
  }
  on_failure(failed);
}

absl::Status CollectiveWatchdog::health() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

int CollectiveWatchdog::in_flight() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(entries_.size());
}

void CollectiveWatchdog::Run() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    mu_.AwaitWithTimeout(absl::Condition(&stop), options_.poll_interval);
    if (stopping_) break;
    mu_.Unlock();
    Poll();
    mu_.Lock();
  }
}

void CollectiveWatchdog::Poll() {
  std::vector<std::string> expired;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return;
    const absl::Time now = absl::Now();
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->is_done()) {
        it = entries_.erase(it);
        continue;
      }
      if (now - it->issued >= options_.timeout) expired.push_back(it->description);
      ++it;
    }
    if (entries_.empty()) return;  // nothing in flight: no need to ask the communicator
  }
  if (!expired.empty()) {
    FailGroup(absl::DeadlineExceededError(absl::StrCat(
        expired.front(), ": not completed after ", absl::FormatDuration(options_.timeout),
        expired.size() > 1 ? absl::StrCat(" (", expired.size() - 1, " more collectives too)") : "",
        "; communicator of ", group_, " aborted by the watchdog")));
    return;
  }
  const absl::Status async = probe_.async_error();
  if (!async.ok()) {
    FailGroup(absl::Status(async.code(), absl::StrCat(group_, ": ", async.message(),
                                                      "; communicator aborted by the watchdog")));
  }
}

void CollectiveWatchdog::FailGroup(absl::Status failure) {
  std::list<Entry> failed;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return;
    failure_ = failure;
    failed.swap(entries_);
  }
  probe_.abort();
  for (const Entry& entry : failed) {
    entry.on_failure(absl::Status(failure.code(), absl::StrCat(entry.description, " failed: ", failure.message())));
  }
}

}  // namespace ddp
