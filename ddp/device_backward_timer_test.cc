// DeviceBackwardTimer's logic on the CPU, over a fake device whose clock and progress the test drives.
#include "ddp/device_backward_timer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace ddp {
namespace {

// A fake stream: Record stamps an event with the device clock and its position in the stream; the device
// has completed everything up to done_until.
class FakeEvents : public DeviceEvents {
 public:
  absl::StatusOr<Event> Create() override {
    ++created;
    const auto handle = reinterpret_cast<Event>(static_cast<uintptr_t>(created));
    events_[handle] = {};
    return handle;
  }
  absl::Status Record(Event event) override {
    if (!record_error.ok()) return record_error;
    events_.at(event) = {clock, ++position};
    return absl::OkStatus();
  }
  absl::StatusOr<bool> Completed(Event event) override { return events_.at(event).position <= done_until; }
  absl::StatusOr<double> ElapsedSeconds(Event from, Event to) override {
    return events_.at(to).time - events_.at(from).time;
  }
  void Destroy(Event event) override { events_.erase(event); }
  std::string device_name() const override { return "fake:0"; }

  void CompleteAll() { done_until = position; }
  int live_events() const { return static_cast<int>(events_.size()); }

  double clock = 0;        // device seconds
  int64_t position = 0;    // events recorded so far
  int64_t done_until = 0;  // the device finished the events at positions <= this
  int created = 0;
  absl::Status record_error;

 private:
  struct Stamp {
    double time = 0;
    int64_t position = 0;
  };
  std::map<Event, Stamp> events_;
};

class DeviceBackwardTimerTest : public ::testing::Test {
 protected:
  DeviceBackwardTimerTest() : fake_(new FakeEvents), timer_(std::unique_ptr<DeviceEvents>(fake_)) {}

  // One iteration: mark at the current device time (when `marked`), gradients ready at +1 s and +3 s,
  // the iteration's end at +5 s; the host saw backward take 2 ms.
  void Iteration(int64_t index, bool marked) {
    if (marked) timer_.MarkBackwardStart();
    for (double step : {1.0, 2.0}) {
      fake_->clock += step;
      timer_.OnGradientReady(GradientReadyEvent{});
    }
    fake_->clock += 2;
    IterationEndEvent end;
    end.iteration = index;
    end.backward_start = absl::UnixEpoch();
    end.backward_end = absl::UnixEpoch() + absl::Milliseconds(2);
    timer_.OnIterationEnd(end);
  }

  FakeEvents* fake_;  // owned by timer_
  DeviceBackwardTimer timer_;
};

// start -> last gradient and start -> iteration end on the device clock, plus the host figure; nothing is
// resolved before the device completed the events.
TEST_F(DeviceBackwardTimerTest, ReportsTheDeviceIntervalsOnceCompleted) {
  Iteration(0, /*marked=*/true);
  EXPECT_TRUE(timer_.history().empty());  // the device has not run the events yet
  fake_->CompleteAll();
  ASSERT_TRUE(timer_.Flush(absl::Seconds(1)).ok());
  ASSERT_EQ(timer_.history().size(), 1u);
  const DeviceBackwardStats& s = timer_.history()[0];
  EXPECT_EQ(s.iteration, 0);
  EXPECT_DOUBLE_EQ(s.backward_compute_s, 3.0);
  EXPECT_DOUBLE_EQ(s.backward_synced_s, 5.0);
  EXPECT_DOUBLE_EQ(s.host_backward_compute_s, 0.002);
}

// Iterations without a MarkBackwardStart are not timed, and a mark times only the iteration it precedes.
TEST_F(DeviceBackwardTimerTest, TimesOnlyMarkedIterations) {
  Iteration(0, false);
  Iteration(1, true);
  Iteration(2, false);
  fake_->CompleteAll();
  ASSERT_TRUE(timer_.Flush(absl::Seconds(1)).ok());
  ASSERT_EQ(timer_.history().size(), 1u);
  EXPECT_EQ(timer_.history()[0].iteration, 1);
}

// An iteration end resolves, without waiting, the earlier iterations the device finished, in order, and
// leaves the rest pending.
TEST_F(DeviceBackwardTimerTest, ResolvesFinishedIterationsInOrderWithoutWaiting) {
  Iteration(0, true);
  fake_->CompleteAll();  // the device caught up with iteration 0
  Iteration(1, true);    // resolves 0; 1 is still running
  ASSERT_EQ(timer_.history().size(), 1u);
  EXPECT_EQ(timer_.history()[0].iteration, 0);
  fake_->CompleteAll();
  ASSERT_TRUE(timer_.Flush(absl::Seconds(1)).ok());
  ASSERT_EQ(timer_.history().size(), 2u);
  EXPECT_EQ(timer_.history()[1].iteration, 1);
}

// Flush is bounded: a device that never finishes gives DeadlineExceeded naming the iterations and device.
TEST_F(DeviceBackwardTimerTest, FlushTimesOutNamingTheDevice) {
  Iteration(0, true);
  Iteration(1, true);
  const absl::Status status = timer_.Flush(absl::Milliseconds(20));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(status.message().find("2 timed iterations (from iteration 0) did not finish on fake:0"),
            std::string::npos)
      << status;
}

// Events are reused: a long run needs the events of the iterations in flight, not three per iteration;
// the destructor destroys them all.
TEST(DeviceBackwardTimerPoolTest, ReusesEventsAndDestroysThemAll) {
  auto* fake = new FakeEvents;
  {
    DeviceBackwardTimer timer{std::unique_ptr<DeviceEvents>(fake)};
    for (int64_t i = 0; i < 100; ++i) {
      timer.MarkBackwardStart();
      timer.OnGradientReady(GradientReadyEvent{});
      timer.OnIterationEnd(IterationEndEvent{i});
      fake->CompleteAll();
    }
    ASSERT_TRUE(timer.Flush(absl::Seconds(1)).ok());
    EXPECT_EQ(timer.history().size(), 100u);
    EXPECT_LE(timer.events_created(), 6);
    EXPECT_EQ(fake->live_events(), timer.events_created());
    // One more iteration in flight when the timer goes away: its events are destroyed too.
    timer.MarkBackwardStart();
    timer.OnGradientReady(GradientReadyEvent{});
    timer.OnIterationEnd(IterationEndEvent{100});
    EXPECT_EQ(fake->live_events(), timer.events_created());
    EXPECT_EQ(timer.history().size(), 100u);
  }
}

// A failing event call stops the timing: status() and Flush return it, and no iteration is reported.
TEST_F(DeviceBackwardTimerTest, AnEventFailureStopsTimingWithItsStatus) {
  fake_->record_error = absl::InternalError("cudaEventRecord: cudaErrorLaunchFailure");
  Iteration(0, true);
  fake_->record_error = absl::OkStatus();
  Iteration(1, true);
  fake_->CompleteAll();
  EXPECT_EQ(timer_.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(timer_.Flush(absl::Seconds(1)).code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(timer_.history().empty());
}

// The summary skips the warm-up iteration: means and 90th percentiles in ms, by hand.
TEST(FormatDeviceBackwardStatsTest, SummarisesAfterTheWarmup) {
  EXPECT_EQ(FormatDeviceBackwardStats({}), "");
  const std::vector<DeviceBackwardStats> history = {
      {0, 1.0, 2.0, 0.5}, {1, 0.001, 0.002, 0.0005}, {2, 0.003, 0.004, 0.0015}};
  EXPECT_EQ(FormatDeviceBackwardStats(history),
            "device backward ms over 2 iterations: compute mean 2.000 p90 3.000, synced mean 3.000 p90 4.000; "
            "host backward compute mean 1.000\n");
}

}  // namespace
}  // namespace ddp
