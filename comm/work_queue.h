// WorkQueue: runs a backend's collectives one at a time, in issue order, on its own thread, and
// completes their AsyncWork handles.
#ifndef DDP_COMM_WORK_QUEUE_H_
#define DDP_COMM_WORK_QUEUE_H_

#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/async_work.h"

namespace ddp {

// One worker thread and a FIFO of (work, task). Thread-safe: any thread may Enqueue.
class WorkQueue {
 public:
  // A task returns the status its work completes with.
  using Task = std::function<absl::Status()>;

  WorkQueue();
  // Stop(), then frees the queue.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `task`; the worker calls work->MarkStarted(), runs it and completes `work` with its status.
  // After Stop, completes `work` with kCancelled instead.
  void Enqueue(std::shared_ptr<AsyncWork> work, Task task);

  // Works still queued complete with kCancelled ("process group destroyed before it ran"); the task
  // running now (on the worker or on a waiter) finishes first (its waits are bounded by the group's
  // timeout). Then joins the thread; no task runs after Stop returns. Idempotent, but not to be called
  // from two threads at once. A backend whose tasks use its own members calls this in its destructor
  // when its Works may keep the queue alive (to call RunIfNext).
  void Stop();

  // The waiter's fast path (Note [Waiter runs the work] in comm/gloo/process_group_gloo.cc): when `work` is
  // the next queued task and nothing runs now, runs it on the calling thread exactly as the worker would
  // (MarkStarted, the task, Complete) and returns true; later Enqueues and the worker wait behind it, so
  // issue order holds. Returns false, running nothing, when `work` is not next in the queue (it runs,
  // ran, or waits behind another task), a task runs now, or the queue is stopping.
  bool RunIfNext(const AsyncWork& work);
  // The rule of that fast path for a thread about to Wait(wait_timeout) on `work`, whose group bounds a
  // collective by `group_timeout`: RunIfNext(work) when the wait covers the whole group timeout (a shorter
  // wait must not block longer inside the collective) and `work` has not completed.
  void RunForWaiter(AsyncWork& work, absl::Duration wait_timeout, absl::Duration group_timeout);

  // The inline fast path (Note [Inline collectives] in comm/shm/process_group_shm.cc): true when nothing is
  // queued or running; the caller then owns the queue's turn and may run a collective on its own thread
  // while later Enqueues wait behind it. Every true must be followed by exactly one EndInline.
  bool TryBeginInline();
  // Gives the turn back. With a `task`, queues (work, task) ahead of everything enqueued meanwhile, so a
  // collective the caller could not finish without blocking continues on the worker, still in issue order.
  void EndInline(std::shared_ptr<AsyncWork> work = nullptr, Task task = nullptr);

 private:
  void Loop();
  // Runs a dequeued task and completes its work. REQUIRES: busy_ set by the caller, mu_ not held.
  static void Run(std::pair<std::shared_ptr<AsyncWork>, Task>& item);

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // a task runs (on the worker, or inline on a caller)
  std::deque<std::pair<std::shared_ptr<AsyncWork>, Task>> queue_ ABSL_GUARDED_BY(mu_);
  // Signalled (under mu_) whenever the worker may have a turn: a task queued while nothing runs, the
  // turn given back with tasks queued, or Stop. Only the worker waits on it.
  absl::CondVar turn_free_;
  std::thread thread_;  // last: starts after the members above exist; joined by Stop
};

}  // namespace ddp

#endif  // DDP_COMM_WORK_QUEUE_H_
