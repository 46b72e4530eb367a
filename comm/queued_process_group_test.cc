// The skeleton of the queued backends on a fake backend (no peers): how calls are named and numbered,
// the broken-group policy, and the defaults of the collectives a backend lacks. The real backends'
// own tests cover the same paths over shared memory, Gloo and MPI.
#include "comm/queued_process_group.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "comm/flight_recorder_dump.h"
#include "io/file.h"
#include "tensor/factory.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(10);

// The test's scratch folder `name`, where the fake groups' flight recorders dump.
std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

QueuedProcessGroupOptions FakeOptions(absl::Duration timeout = absl::Seconds(10), const std::string& dumps = "dumps",
                                      int recorder_entries = 2000) {
  QueuedProcessGroupOptions options;
  options.backend = "fake";
  options.timeout = timeout;
  options.postmortem.recorder = FlightRecorderOptions{recorder_entries, TestDir(dumps)};
  return options;
}

// Rank 0 of 2 whose calls succeed at once, except an AllReduce(max), which fails as a lost peer would,
// and a Barrier, which waits for `release` (a peer that never comes, until the test says so).
class FakeBackend : public QueuedProcessGroup {
 public:
  explicit FakeBackend(QueuedProcessGroupOptions options = FakeOptions()) : QueuedProcessGroup(0, 2, options) {}
  ~FakeBackend() override {
    if (!release.HasBeenNotified()) release.Notify();
    StopQueue();
  }

  FlightRecorder* recorder() { return postmortem().recorder(); }

  int failures_seen = 0;  // OnFailure calls (worker thread; read after a Wait)
  absl::Notification release;

 private:
  std::shared_ptr<Work> Run(const CollectiveSpec& spec) {
    return Issue(spec, [this](const RunningCall& call) {
      if (call.work->spec().kind == CollectiveKind::kBarrier) {
        release.WaitForNotificationWithTimeout(absl::Seconds(60));
        return absl::OkStatus();
      }
      const bool fails = call.work->spec().kind == CollectiveKind::kAllReduce && call.work->spec().op == ReduceOp::kMax;
      return fails ? absl::UnavailableError(absl::StrCat(call(), ": peer gone")) : absl::OkStatus();
    });
  }
  std::shared_ptr<Work> IssueAllReduce(const CollectiveSpec& spec, const Tensor&, ReduceOp) override {
    return Run(spec);
  }
  std::shared_ptr<Work> IssueBroadcast(const CollectiveSpec& spec, const Tensor&, int) override { return Run(spec); }
  std::shared_ptr<Work> IssueAllGather(const CollectiveSpec& spec, const std::vector<Tensor>&,
                                       const Tensor&) override {
    return Run(spec);
  }
  std::shared_ptr<Work> IssueReduceScatter(const CollectiveSpec& spec, const Tensor&, const std::vector<Tensor>&,
                                           ReduceOp) override {
    return Run(spec);
  }
  std::shared_ptr<Work> IssueReduce(const CollectiveSpec& spec, const Tensor&, int, ReduceOp) override {
    return Run(spec);
  }
  std::shared_ptr<Work> IssueBarrier(const CollectiveSpec& spec) override { return Run(spec); }
  void OnFailure(const absl::Status&) override { ++failures_seen; }
};

std::string DescriptionOf(const std::shared_ptr<Work>& work) {
  return static_cast<const AsyncWork&>(*work).description();
}

TEST(QueuedProcessGroupTest, CallsAreNamedAndNumberedInIssueOrder) {
  FakeBackend group;
  EXPECT_EQ(group.backend_name(), "fake");
  const Tensor t = Zeros({3});
  EXPECT_EQ(DescriptionOf(group.AllReduce(t)), "AllReduce(sum) #0 of 3 float32 on rank 0/2 (fake)");
  EXPECT_EQ(DescriptionOf(group.Broadcast(t, 1)), "Broadcast(root 1) #1 of 3 float32 on rank 0/2 (fake)");
  EXPECT_EQ(DescriptionOf(group.AllGather({t, t}, t)), "AllGather #2 of 3 float32 on rank 0/2 (fake)");
  EXPECT_EQ(DescriptionOf(group.ReduceScatter(t, {t, t}, ReduceOp::kAvg)),
            "ReduceScatter(avg) #3 of 3 float32 on rank 0/2 (fake)");
  EXPECT_EQ(DescriptionOf(group.Reduce(t, 1, ReduceOp::kMin)), "Reduce(min, root 1) #4 of 3 float32 on rank 0/2 (fake)");
  std::shared_ptr<Work> barrier = group.Barrier();
  EXPECT_EQ(DescriptionOf(barrier), "Barrier #5 on rank 0/2 (fake)");
  group.release.Notify();
  EXPECT_TRUE(barrier->Wait(kWait).ok());
  EXPECT_EQ(group.failures_seen, 0);
}

TEST(QueuedProcessGroupTest, AFailureBreaksTheGroupAndLaterCallsNameIt) {
  FakeBackend group;
  const absl::Status failed = group.AllReduce(Zeros({3}), ReduceOp::kMax)->Wait(kWait);
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(failed.message(), "AllReduce(max) #0 of 3 float32 on rank 0/2 (fake) failed: peer gone");
  const absl::Status later = group.Broadcast(Zeros({3}), 1)->Wait(kWait);
  EXPECT_EQ(later.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(later.message(),
            "Broadcast(root 1) #1 of 3 float32 on rank 0/2 (fake) not run: the group failed before (AllReduce(max) #0 "
            "of 3 float32 on rank 0/2 (fake) failed: peer gone)");
  EXPECT_EQ(group.failures_seen, 1);  // the refused call did not fail anew
}

TEST(QueuedProcessGroupTest, TheRecorderKeepsEveryCallInIssueOrder) {
  FakeBackend group;
  const Tensor t = Zeros({3});
  group.AllReduce(t);
  group.Broadcast(t, 1);
  ASSERT_TRUE(group.AllGather({t, t}, t)->Wait(kWait).ok());
  const std::vector<FlightEntry> entries = group.recorder()->Snapshot();
  ASSERT_EQ(entries.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(entries[i].sequence, i);
    EXPECT_EQ(entries[i].state, FlightState::kCompleted);  // completed in issue order, so all are
  }
  EXPECT_EQ(entries[1].spec.Signature(), "Broadcast(root 1) of 3 float32");
}

// The first failure of a group leaves its dump, with the failing call and the reason.
TEST(QueuedProcessGroupTest, AFailureDumpsTheRecorder) {
  FakeBackend group(FakeOptions(absl::Seconds(10), "failure_dumps"));
  ASSERT_FALSE(group.AllReduce(Zeros({3}), ReduceOp::kMax)->Wait(kWait).ok());
  const std::string path = TestDir("failure_dumps/fake-group/rank0.jsonl");
  absl::StatusOr<std::string> text = ReadFile(path);
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<FlightDump> dump = DecodeFlightDump(*text, path);
  ASSERT_TRUE(dump.ok()) << dump.status();
  EXPECT_EQ(dump->header.reason, "AllReduce(max) #0 of 3 float32 on rank 0/2 (fake) failed: peer gone");
  ASSERT_EQ(dump->entries.size(), 1u);
  EXPECT_EQ(dump->entries[0].state, FlightState::kFailed);
}

// A wait that covered the group's timeout on a call still running is a hang: its error says where this
// rank stands and where the dump is; a shorter wait (a poll) says only that it is not done.
TEST(QueuedProcessGroupTest, AWaitThatOutlastsTheTimeoutExplainsTheHang) {
  FakeBackend group(FakeOptions(absl::Milliseconds(200), "hang_dumps"));
  ASSERT_TRUE(group.AllReduce(Zeros({3}))->Wait(kWait).ok());
  std::shared_ptr<Work> stuck = group.Barrier();
  const absl::Status poll = stuck->Wait(absl::Milliseconds(1));
  EXPECT_EQ(poll.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(poll.message(), "Barrier #1 on rank 0/2 (fake): not completed after 1ms");
  const absl::Status hang = stuck->Wait(absl::Milliseconds(200));
  EXPECT_EQ(hang.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(hang.message(), HasSubstr("Barrier #1 on rank 0/2 (fake): not completed after 200ms [flight recorder: "
                                        "rank 0 is in Barrier #1 (running for "));
  EXPECT_THAT(hang.message(), HasSubstr("after completing every call through #0; the other ranks' progress is unknown "
                                        "(no store to exchange it); dump " + TestDir("hang_dumps/fake-group/rank0.jsonl")));
  group.release.Notify();
  EXPECT_TRUE(stuck->Wait(kWait).ok());
}

TEST(QueuedProcessGroupTest, TheRecorderCanBeTurnedOff) {
  FakeBackend group(FakeOptions(absl::Milliseconds(100), "off_dumps", /*recorder_entries=*/0));
  EXPECT_FALSE(group.recorder()->enabled());
  const absl::Status hang = group.Barrier()->Wait(absl::Milliseconds(100));
  EXPECT_THAT(hang.message(), HasSubstr("[flight recorder: this rank recorded no calls (DDP_FLIGHT_RECORDER_ENTRIES=0)]"));
  EXPECT_FALSE(ReadFile(TestDir("off_dumps/fake-group/rank0.jsonl")).ok());
}

TEST(QueuedProcessGroupTest, CollectivesTheBackendLacksAreUnimplementedWithoutANumber) {
  FakeBackend group;
  const Tensor t = Zeros({3});
  const absl::Status gather = group.Gather({t, t}, t, 0)->Wait(kWait);
  EXPECT_EQ(gather.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(gather.message(), HasSubstr("Gather is not implemented by the fake backend"));
  EXPECT_EQ(group.AllToAll({t, t}, {t, t})->Wait(kWait).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(DescriptionOf(group.Broadcast(t, 0)), "Broadcast(root 0) #0 of 3 float32 on rank 0/2 (fake)");
}

TEST(CollectiveDescriptionTest, SpecsNameTheirCalls) {
  const Tensor t = Zeros({4}, DType::kInt64);
  EXPECT_EQ(CollectiveSpec::AllReduce(t, ReduceOp::kProduct).Signature(), "AllReduce(product) of 4 int64");
  EXPECT_EQ(CollectiveSpec::Gather(t, 2).Signature(), "Gather(root 2) of 4 int64");
  EXPECT_EQ(CollectiveSpec::Barrier().Signature(), "Barrier");
  EXPECT_EQ(DescribeCall(CollectiveSpec::Send(t, 1, 5), kUnnumbered, 0, 2, "gloo"),
            "Send(to rank 1, tag 5) of 4 int64 on rank 0/2 (gloo)");
  EXPECT_EQ(DescribeCall(CollectiveSpec::Recv(t, 0, 5), kUnnumbered, 1, 2, "gloo"),
            "Recv(from rank 0, tag 5) of 4 int64 on rank 1/2 (gloo)");
  EXPECT_EQ(DescribeCall(CollectiveSpec::MonitoredBarrier(), 3, 1, 2, "gloo"), "MonitoredBarrier #3 on rank 1/2 (gloo)");
  EXPECT_EQ(DescribeCall("Gather", kUnnumbered, "", 0, 2, ""), "Gather on rank 0/2");
}

}  // namespace
}  // namespace ddp
