#include "comm/collective_watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

// A fake communicator: an asynchronous error to inject and a count of aborts.
struct FakeCommunicator {
  absl::Mutex mu;
  absl::Status async_error ABSL_GUARDED_BY(mu);
  std::atomic<int> aborts{0};

  CommunicatorProbe Probe() {
    return CommunicatorProbe{[this] {
                               absl::MutexLock lock(&mu);
                               return async_error;
                             },
                             [this] { ++aborts; }};
  }
};

// A fake collective: done when the test says so; records the failure the watchdog gives it.
struct FakeCollective {
  std::atomic<bool> done{false};
  absl::Mutex mu;
  absl::Status failure ABSL_GUARDED_BY(mu);
  absl::Notification failed;

  void WatchOn(CollectiveWatchdog& watchdog, const std::string& description) {
    watchdog.Watch(description, [this] { return done.load(); },
                   [this](const absl::Status& s) {
                     absl::MutexLock lock(&mu);
                     failure = s;
                     failed.Notify();
                   });
  }
  absl::Status Failure() {
    absl::MutexLock lock(&mu);
    return failure;
  }
};

CollectiveWatchdogOptions Fast(absl::Duration timeout) {
  CollectiveWatchdogOptions options;
  options.timeout = timeout;
  options.poll_interval = absl::Milliseconds(5);
  return options;
}

TEST(CollectiveWatchdogTest, CompletedCollectivesAreForgottenAndNothingAborts) {
  FakeCommunicator comm;
  CollectiveWatchdog watchdog("rank 0/2 (fake)", comm.Probe(), Fast(absl::Milliseconds(200)));
  FakeCollective a, b;
  a.WatchOn(watchdog, "AllReduce #1");
  b.WatchOn(watchdog, "AllReduce #2");
  a.done = true;
  b.done = true;
  for (int i = 0; i < 200 && watchdog.in_flight() > 0; ++i) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(watchdog.in_flight(), 0);
  absl::SleepFor(absl::Milliseconds(300));  // past the timeout: nothing may fire for finished work
  EXPECT_TRUE(watchdog.health().ok());
  EXPECT_EQ(comm.aborts.load(), 0);
}

// A hung collective: after the timeout the communicator is aborted once, the collective and every other
// in-flight one fail naming the hung one, and later collectives fail at once.
TEST(CollectiveWatchdogTest, HungCollectiveAbortsAndFailsTheGroup) {
  FakeCommunicator comm;
  CollectiveWatchdog watchdog("rank 1/2 (fake)", comm.Probe(), Fast(absl::Milliseconds(100)));
  FakeCollective hung, queued;
  const absl::Time start = absl::Now();
  hung.WatchOn(watchdog, "AllReduce #7 of 1024 float32 on rank 1/2 (fake)");
  queued.WatchOn(watchdog, "Broadcast #8");
  ASSERT_TRUE(hung.failed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_TRUE(absl::IsDeadlineExceeded(hung.Failure()));
  EXPECT_THAT(std::string(hung.Failure().message()),
              HasSubstr("AllReduce #7 of 1024 float32 on rank 1/2 (fake): not completed after 100ms"));
  ASSERT_TRUE(queued.failed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_THAT(std::string(queued.Failure().message()), HasSubstr("Broadcast #8 failed: AllReduce #7"));
  EXPECT_EQ(comm.aborts.load(), 1);
  EXPECT_THAT(std::string(watchdog.health().message()), HasSubstr("aborted by the watchdog"));
  FakeCollective later;
  later.WatchOn(watchdog, "AllReduce #9");
  EXPECT_TRUE(later.failed.HasBeenNotified());
  EXPECT_EQ(comm.aborts.load(), 1);
}

TEST(CollectiveWatchdogTest, AsynchronousErrorAbortsBeforeTheTimeout) {
  FakeCommunicator comm;
  CollectiveWatchdog watchdog("rank 0/4 (fake)", comm.Probe(), Fast(absl::Seconds(60)));
  FakeCollective pending;
  pending.WatchOn(watchdog, "AllReduce #3");
  {
    absl::MutexLock lock(&comm.mu);
    comm.async_error = absl::InternalError("asynchronous NCCL error: remote process exited");
  }
  ASSERT_TRUE(pending.failed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_THAT(std::string(pending.Failure().message()),
              HasSubstr("AllReduce #3 failed: rank 0/4 (fake): asynchronous NCCL error: remote process exited"));
  EXPECT_EQ(comm.aborts.load(), 1);
}

}  // namespace
}  // namespace ddp
