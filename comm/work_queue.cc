#include "comm/work_queue.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "tensor/threads.h"

namespace ddp {

WorkQueue::WorkQueue() : thread_([this] { Loop(); }) {}

WorkQueue::~WorkQueue() { Stop(); }

void WorkQueue::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    turn_free_.Signal();
  }
  // The worker cancels what is still queued once no task runs (Loop), then returns.
  if (thread_.joinable()) thread_.join();
}

void WorkQueue::Enqueue(std::shared_ptr<AsyncWork> work, Task task) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      queue_.emplace_back(std::move(work), std::move(task));
      if (!busy_) turn_free_.Signal();
      return;
    }
  }
  // After Stop no task runs, so the work would never complete.
  work->Complete(absl::CancelledError(absl::StrCat(work->description(), ": process group destroyed before it ran")));
}

void WorkQueue::Loop() {
  // Kernels a task runs on this thread (a hook's decompression, PowerSGD's GEMMs) run on it alone: the
  // kernel thread count is per thread (tensor/threads.h), and here it would otherwise be the process
  // default, every core, in an OpenMP team beside the ranks' own compute.
  SetNumThreads(1);
  while (true) {
    std::pair<std::shared_ptr<AsyncWork>, Task> item;
    {
      absl::MutexLock lock(&mu_);
      // A CondVar, not mu_.Await: a thread blocked in Await makes every Unlock of mu_ evaluate its
      // condition (absl's slow path), on the inline path of every small collective.
      while (busy_ || (!stopping_ && queue_.empty())) turn_free_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping with nothing left
      item = std::move(queue_.front());
      queue_.pop_front();
      if (stopping_) {
        item.first->Complete(absl::CancelledError(
            absl::StrCat(item.first->description(), ": process group destroyed before it ran")));
        continue;
      }
      busy_ = true;
    }
    Run(item);
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
}

void WorkQueue::Run(std::pair<std::shared_ptr<AsyncWork>, Task>& item) {
  item.first->MarkStarted();
  item.first->Complete(item.second());
}

bool WorkQueue::RunIfNext(const AsyncWork& work) {
  std::pair<std::shared_ptr<AsyncWork>, Task> item;
  {
    absl::MutexLock lock(&mu_);
    if (busy_ || stopping_ || queue_.empty() || queue_.front().first.get() != &work) return false;
    item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
  }
  Run(item);
  absl::MutexLock lock(&mu_);
  busy_ = false;
  if (!queue_.empty() || stopping_) turn_free_.Signal();
  return true;
}

void WorkQueue::RunForWaiter(AsyncWork& work, absl::Duration wait_timeout, absl::Duration group_timeout) {
  if (wait_timeout >= group_timeout && !work.IsCompleted()) RunIfNext(work);
}

bool WorkQueue::TryBeginInline() {
  absl::MutexLock lock(&mu_);
  if (busy_ || stopping_ || !queue_.empty()) return false;
  busy_ = true;
  return true;
}

void WorkQueue::EndInline(std::shared_ptr<AsyncWork> work, Task task) {
  absl::MutexLock lock(&mu_);
  DDP_CHECK(busy_) << "WorkQueue::EndInline without TryBeginInline";
  if (task) queue_.emplace_front(std::move(work), std::move(task));
  busy_ = false;
  if (!queue_.empty() || stopping_) turn_free_.Signal();
}

}  // namespace ddp
