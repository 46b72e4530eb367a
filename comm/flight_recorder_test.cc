// The flight recorder's ring: issue order, wrap-around keeping the newest calls, states read from the
// Works, and the environment variables that size it.
#include "comm/flight_recorder.h"

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

CollectiveSpec AllReduceSpec(int64_t numel) {
  CollectiveSpec spec;
  spec.kind = CollectiveKind::kAllReduce;
  spec.numel = numel;
  return spec;
}

EnvLookup Env(std::map<std::string, std::string> values) {
  return [values](const std::string& name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

TEST(FlightRecorderTest, KeepsTheNewestCallsInIssueOrder) {
  FlightRecorder recorder(3);
  std::vector<std::shared_ptr<AsyncWork>> works;
  for (int i = 0; i < 5; ++i) {
    works.push_back(std::make_shared<AsyncWork>("call"));
    recorder.Record(i, AllReduceSpec(10 + i), works.back());
  }
  const std::vector<FlightEntry> entries = recorder.Snapshot();
  ASSERT_EQ(entries.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(entries[i].record, static_cast<uint64_t>(2 + i));
    EXPECT_EQ(entries[i].sequence, static_cast<uint64_t>(2 + i));
    EXPECT_EQ(entries[i].spec.numel, 12 + i);
    EXPECT_NE(entries[i].issued, absl::InfinitePast());
  }
  EXPECT_EQ(recorder.recorded(), 5u);
  EXPECT_EQ(recorder.capacity(), 3);
}

TEST(FlightRecorderTest, ReadsEachCallsStateFromItsWork) {
  FlightRecorder recorder(8);
  auto queued = std::make_shared<AsyncWork>("queued");
  auto running = std::make_shared<AsyncWork>("running");
  auto done = std::make_shared<AsyncWork>("done");
  auto failed = std::make_shared<AsyncWork>("failed");
  auto send = std::make_shared<AsyncWork>("send");
  recorder.Record(0, AllReduceSpec(1), done);
  recorder.Record(1, AllReduceSpec(1), failed);
  recorder.Record(2, AllReduceSpec(1), running);
  recorder.Record(3, AllReduceSpec(1), queued);
  recorder.Record(kUnnumbered, AllReduceSpec(1), send);
  done->MarkStarted();
  done->Complete(absl::OkStatus());
  failed->Complete(absl::UnavailableError("peer gone"));
  running->MarkStarted();

  const std::vector<FlightEntry> entries = recorder.Snapshot();
  ASSERT_EQ(entries.size(), 5u);
  EXPECT_EQ(entries[0].state, FlightState::kCompleted);
  EXPECT_NE(entries[0].started, absl::InfinitePast());
  EXPECT_NE(entries[0].ended, absl::InfinitePast());
  EXPECT_EQ(entries[1].state, FlightState::kFailed);
  EXPECT_EQ(entries[1].error, "peer gone");
  EXPECT_EQ(entries[2].state, FlightState::kStarted);
  EXPECT_EQ(entries[2].ended, absl::InfinitePast());
  EXPECT_EQ(entries[3].state, FlightState::kIssued);
  EXPECT_EQ(entries[3].started, absl::InfinitePast());
  EXPECT_EQ(entries[4].sequence, kUnnumbered);
}

TEST(FlightRecorderTest, ClearDropsTheWorks) {
  FlightRecorder recorder(2);  // the call never completes: its Work stays in the ring
  auto work = std::make_shared<AsyncWork>("call");
  recorder.Record(0, AllReduceSpec(1), work);
  EXPECT_EQ(work.use_count(), 2);
  recorder.Clear();
  EXPECT_EQ(work.use_count(), 1);
  EXPECT_TRUE(recorder.Snapshot().empty());
  EXPECT_EQ(recorder.recorded(), 0u);
}

TEST(FlightRecorderOptionsTest, DefaultsAndValidValues) {
  absl::StatusOr<FlightRecorderOptions> defaults = FlightRecorderOptionsFromEnv(Env({}));
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->entries, 2000);
  EXPECT_EQ(defaults->dump_dir, "");
  absl::StatusOr<FlightRecorderOptions> set =
      FlightRecorderOptionsFromEnv(Env({{"DDP_FLIGHT_RECORDER_ENTRIES", "0"}, {"DDP_FLIGHT_RECORDER_DIR", "/x/y"}}));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->entries, 0);
  EXPECT_EQ(set->dump_dir, "/x/y");
}

TEST(FlightRecorderOptionsTest, BadValuesAreNamed) {
  for (const std::string bad : {"abc", "-1", "1.5", "", "99999999999"}) {
    absl::StatusOr<FlightRecorderOptions> options =
        FlightRecorderOptionsFromEnv(Env({{"DDP_FLIGHT_RECORDER_ENTRIES", bad}}));
    ASSERT_FALSE(options.ok()) << bad;
    EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(options.status().message(), HasSubstr("DDP_FLIGHT_RECORDER_ENTRIES=\"" + bad + "\""));
  }
  absl::StatusOr<FlightRecorderOptions> empty_dir = FlightRecorderOptionsFromEnv(Env({{"DDP_FLIGHT_RECORDER_DIR", ""}}));
  ASSERT_FALSE(empty_dir.ok());
  EXPECT_THAT(empty_dir.status().message(), HasSubstr("DDP_FLIGHT_RECORDER_DIR"));
}

// Works are held only until their call completed and a later Record copied the outcome: in steady
// state the ring keeps the running calls' Works, not N of them.
TEST(FlightRecorderTest, LetsCompletedWorksGoKeepingTheirOutcome) {
  FlightRecorder recorder(8);
  auto first = std::make_shared<AsyncWork>("first");
  auto second = std::make_shared<AsyncWork>("second");
  auto third = std::make_shared<AsyncWork>("third");
  {
    absl::MutexLock lock(&recorder.mu());
    recorder.Record(0, AllReduceSpec(1), first);
    recorder.Record(1, AllReduceSpec(1), second);
  }
  first->MarkStarted();
  first->Complete(absl::DataLossError("bad bytes"));
  EXPECT_EQ(first.use_count(), 2);
  {
    absl::MutexLock lock(&recorder.mu());
    recorder.Record(2, AllReduceSpec(1), third);  // resolves #0; #1 still runs, so #2 waits behind it
  }
  EXPECT_EQ(first.use_count(), 1);
  EXPECT_EQ(second.use_count(), 2);
  const std::vector<FlightEntry> entries = recorder.Snapshot();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].state, FlightState::kFailed);
  EXPECT_EQ(entries[0].error, "bad bytes");
  EXPECT_NE(entries[0].started, absl::InfinitePast());
  EXPECT_NE(entries[0].ended, absl::InfinitePast());
  EXPECT_EQ(entries[1].state, FlightState::kIssued);
  EXPECT_EQ(entries[2].state, FlightState::kIssued);
}

TEST(FlightRecorderTest, ACapacityOfZeroRecordsNothing) {
  FlightRecorder recorder(0);
  EXPECT_FALSE(recorder.enabled());
  auto work = std::make_shared<AsyncWork>("call");
  {
    absl::MutexLock lock(&recorder.mu());
    recorder.Record(0, AllReduceSpec(1), work);
  }
  EXPECT_EQ(work.use_count(), 1);
  EXPECT_TRUE(recorder.Snapshot().empty());
}

}  // namespace
}  // namespace ddp
