#include "comm/async_work.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

TEST(AsyncWorkTest, CompleteTakesTheGivenStartTime) {
  AsyncWork work("test");
  const absl::Time started = absl::Now() - absl::Milliseconds(5);
  work.Complete(absl::OkStatus(), started);
  EXPECT_EQ(work.StartTime(), started);
  EXPECT_GE(work.EndTime(), started + absl::Milliseconds(5));
  EXPECT_GE(work.ExecutionSeconds(), 0.005);
}

TEST(AsyncWorkTest, MarkStartedWinsOverTheGivenStartTime) {
  AsyncWork work("test");
  work.MarkStarted();
  const absl::Time marked = work.StartTime();
  work.Complete(absl::OkStatus(), marked - absl::Seconds(1));
  EXPECT_EQ(work.StartTime(), marked);
}

TEST(AsyncWorkTest, WithoutAStartTimeItStartsWhenItEnds) {
  AsyncWork work("test");
  work.Complete(absl::OkStatus());
  EXPECT_EQ(work.StartTime(), work.EndTime());
}

TEST(AsyncWorkTest, LaterCompletionsAreIgnored) {
  AsyncWork work("test");
  work.Complete(absl::InternalError("first"));
  work.Complete(absl::OkStatus());
  EXPECT_EQ(work.Wait(absl::ZeroDuration()).message(), "first");
}

TEST(AsyncWorkTest, PendingWaitTimesOutNamingTheWork) {
  AsyncWork work("AllReduce #3 (test)");
  EXPECT_FALSE(work.IsCompleted());
  absl::Status status = work.Wait(absl::Milliseconds(20));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(status.message().find("AllReduce #3 (test)"), std::string::npos) << status;
}

// Note [Completed without a lock]: a thread that sees IsCompleted() reads the final status, written just
// before by another thread, without taking the lock.
TEST(AsyncWorkTest, ReaderThatSeesCompletionSeesTheStatus) {
  for (int i = 0; i < 2000; ++i) {
    auto work = std::make_shared<AsyncWork>("test");
    std::atomic<bool> go{false};
    std::thread completer([&] {
      while (!go.load()) {
      }
      work->Complete(absl::InternalError("rank 1 lost at iteration " + std::to_string(i)));
    });
    go.store(true);
    while (!work->IsCompleted()) {
    }
    absl::Status seen = work->Wait(absl::ZeroDuration());
    completer.join();
    ASSERT_EQ(seen.message(), "rank 1 lost at iteration " + std::to_string(i));
  }
}

TEST(AsyncWorkTest, WaiterIsWokenByCompletion) {
  AsyncWork work("test");
  std::thread completer([&] {
    absl::SleepFor(absl::Milliseconds(10));
    work.Complete(absl::OkStatus());
  });
  EXPECT_TRUE(work.Wait(absl::Seconds(10)).ok());
  completer.join();
}

}  // namespace
}  // namespace ddp
