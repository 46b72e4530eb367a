// WorkQueue's inline turn (Note [Inline collectives] in comm/process_group_shm.cc): while a caller holds
// it nothing queued runs, a continuation handed back runs before everything queued meanwhile, and no
// caller gets the turn while a queued task runs.
#include "comm/work_queue.h"

#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace ddp
