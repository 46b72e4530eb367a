// WorkQueue's inline turn (Note [Inline collectives] in comm/shm/process_group_shm.cc): while a caller holds
// it nothing queued runs, a continuation handed back runs before everything queued meanwhile, and no
// caller gets the turn while a queued task runs. RunIfNext (Note [Waiter runs the work] in
// comm/gloo/process_group_gloo.cc): a waiter runs only the next task, never one behind another or while a task
// runs, and issue order holds.
#include "comm/work_queue.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tensor/threads.h"

namespace ddp {
namespace {

// Appends to a shared log from any thread.
struct Log {
  absl::Mutex mu;
  std::vector<int> order ABSL_GUARDED_BY(mu);
  WorkQueue::Task Append(int id) {
    return [this, id] {
      absl::MutexLock lock(&mu);
      order.push_back(id);
      return absl::OkStatus();
    };
  }
};

// Kernels in a queued task run on the worker alone, whatever the process default (3 here, from BUILD) and
// the caller's own count.
TEST(WorkQueueTest, TasksRunKernelsOnOneThread) {
  SetNumThreads(2);
  WorkQueue queue;
  int worker_threads = 0;
  auto work = std::make_shared<AsyncWork>("kernel threads");
  queue.Enqueue(work, [&] {
    worker_threads = GetNumThreads();
    return absl::OkStatus();
  });
  ASSERT_TRUE(work->Wait(absl::Seconds(10)).ok());
  EXPECT_EQ(worker_threads, 1);
  EXPECT_EQ(GetNumThreads(), 2) << "the caller's count changed";
  int fresh_thread = 0;
  std::thread([&] { fresh_thread = GetNumThreads(); }).join();
  EXPECT_EQ(fresh_thread, 3) << "control: a thread of its own reads the process default";
}

TEST(WorkQueueInlineTest, QueuedWorkWaitsForTheInlineTurnAndAContinuationGoesFirst) {
  Log log;
  WorkQueue queue;
  ASSERT_TRUE(queue.TryBeginInline());
  EXPECT_FALSE(queue.TryBeginInline()) << "two callers held the turn at once";
  auto queued = std::make_shared<AsyncWork>("queued");
  queue.Enqueue(queued, log.Append(2));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(queued->IsCompleted()) << "a queued task ran while the inline turn was held";
  auto continued = std::make_shared<AsyncWork>("continued");
  queue.EndInline(continued, log.Append(1));
  ASSERT_TRUE(queued->Wait(absl::Seconds(10)).ok());
  ASSERT_TRUE(continued->Wait(absl::Seconds(10)).ok());
  EXPECT_LE(continued->EndTime(), queued->EndTime());
  absl::MutexLock lock(&log.mu);
  EXPECT_EQ(log.order, (std::vector<int>{1, 2}));
}

TEST(WorkQueueInlineTest, NoInlineTurnWhileATaskRunsOrWaits) {
  WorkQueue queue;
  absl::Notification started, release;
  auto running = std::make_shared<AsyncWork>("running");
  queue.Enqueue(running, [&] {
    started.Notify();
    release.WaitForNotificationWithTimeout(absl::Seconds(10));
    return absl::OkStatus();
  });
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(queue.TryBeginInline()) << "inline turn granted while a task runs";
  auto waiting = std::make_shared<AsyncWork>("waiting");
  queue.Enqueue(waiting, [] { return absl::OkStatus(); });
  release.Notify();
  ASSERT_TRUE(running->Wait(absl::Seconds(10)).ok());
  ASSERT_TRUE(waiting->Wait(absl::Seconds(10)).ok());
  // Idle again (the worker clears its turn right after completing `waiting`).
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  bool got = false;
  while (!(got = queue.TryBeginInline()) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_TRUE(got);
  queue.EndInline();
}

TEST(WorkQueueRunIfNextTest, NothingRunsOnTheWaiterWhileATaskRunsOrAheadOfIssueOrder) {
  Log log;
  WorkQueue queue;
  absl::Notification started, release;
  auto running = std::make_shared<AsyncWork>("running");
  queue.Enqueue(running, [&] {
    started.Notify();
    release.WaitForNotificationWithTimeout(absl::Seconds(10));
    return log.Append(0)();
  });
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  auto first = std::make_shared<AsyncWork>("first");
  auto second = std::make_shared<AsyncWork>("second");
  queue.Enqueue(first, log.Append(1));
  queue.Enqueue(second, log.Append(2));
  EXPECT_FALSE(queue.RunIfNext(*first)) << "a waiter ran a task while another task ran";
  EXPECT_FALSE(queue.RunIfNext(*second)) << "a waiter ran a task while another task ran";
  EXPECT_FALSE(queue.RunIfNext(*running)) << "a waiter ran a task that was already running";
  release.Notify();
  ASSERT_TRUE(second->Wait(absl::Seconds(10)).ok());
  EXPECT_FALSE(queue.RunIfNext(*first)) << "a waiter ran a completed task";
  ASSERT_TRUE(first->IsCompleted());
  EXPECT_LE(first->EndTime(), second->EndTime());
  absl::MutexLock lock(&log.mu);
  EXPECT_EQ(log.order, (std::vector<int>{0, 1, 2}));
}

// The waiter usually reaches the queue before the woken worker does; whenever RunIfNext says it ran the
// task, the task ran on the waiter's thread, the work is complete with the task's status and has a start
// time, and every task ran exactly once, in issue order.
TEST(WorkQueueRunIfNextTest, TheWaiterRunsTheNextTaskOnItsOwnThreadInIssueOrder) {
  constexpr int kTasks = 200;
  Log log;
  WorkQueue queue;
  int ran_here = 0;
  for (int i = 0; i < kTasks; ++i) {
    auto work = std::make_shared<AsyncWork>(absl::StrCat("task ", i));
    std::thread::id ran_on;
    queue.Enqueue(work, [&, i] {
      ran_on = std::this_thread::get_id();
      log.Append(i)().IgnoreError();
      return i % 2 == 0 ? absl::OkStatus() : absl::InternalError("odd task");
    });
    if (queue.RunIfNext(*work)) {
      ++ran_here;
      ASSERT_TRUE(work->IsCompleted());
      EXPECT_EQ(ran_on, std::this_thread::get_id());
      EXPECT_NE(work->StartTime(), absl::InfinitePast());
      EXPECT_LE(work->StartTime(), work->EndTime());
    }
    EXPECT_EQ(work->Wait(absl::Seconds(10)).ok(), i % 2 == 0);
  }
  EXPECT_GT(ran_here, 0) << "the worker won every race in " << kTasks << " tries";
  absl::MutexLock lock(&log.mu);
  ASSERT_EQ(log.order.size(), static_cast<size_t>(kTasks));
  for (int i = 0; i < kTasks; ++i) EXPECT_EQ(log.order[i], i);
}

// RunForWaiter runs the task on the waiter only for a wait as long as the group timeout: a waiter with a
// shorter deadline must not end up inside a collective that may block for the whole group timeout.
TEST(WorkQueueRunIfNextTest, OnlyAWaitCoveringTheGroupTimeoutRunsTheTask) {
  constexpr int kTasks = 200;
  const absl::Duration group_timeout = absl::Seconds(30);
  WorkQueue queue;
  int ran_here_full = 0;
  for (int i = 0; i < 2 * kTasks; ++i) {
    const bool full_wait = i % 2 == 0;
    auto work = std::make_shared<AsyncWork>(absl::StrCat("task ", i));
    std::thread::id ran_on;
    queue.Enqueue(work, [&] {
      ran_on = std::this_thread::get_id();
      return absl::OkStatus();
    });
    queue.RunForWaiter(*work, full_wait ? group_timeout : group_timeout - absl::Seconds(1), group_timeout);
    ASSERT_TRUE(work->Wait(absl::Seconds(10)).ok());
    if (!full_wait) {
      EXPECT_NE(ran_on, std::this_thread::get_id()) << "a shorter wait ran task " << i;
    } else if (ran_on == std::this_thread::get_id()) {
      ++ran_here_full;
    }
  }
  EXPECT_GT(ran_here_full, 0) << "the worker won every race in " << kTasks << " tries";
}

TEST(WorkQueueRunIfNextTest, NoTaskRunsAfterStop) {
  auto queue = std::make_shared<WorkQueue>();
  absl::Notification started, release;
  auto running = std::make_shared<AsyncWork>("running");
  queue->Enqueue(running, [&] {
    started.Notify();
    release.WaitForNotificationWithTimeout(absl::Seconds(10));
    return absl::OkStatus();
  });
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  auto queued = std::make_shared<AsyncWork>("queued");
  bool queued_ran = false;
  queue->Enqueue(queued, [&] {
    queued_ran = true;
    return absl::OkStatus();
  });
  std::thread stopper([&] { queue->Stop(); });
  absl::SleepFor(absl::Milliseconds(50));  // Stop waits for the running task
  release.Notify();
  stopper.join();
  EXPECT_TRUE(running->Wait(absl::Seconds(10)).ok());
  EXPECT_FALSE(queue->RunIfNext(*queued));
  EXPECT_EQ(queued->Wait(absl::Seconds(10)).code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(queued_ran);
}

}  // namespace
}  // namespace ddp
