// The skeleton of the queued backends on a fake backend (no peers): how calls are named and numbered,
// the broken-group policy, and the defaults of the collectives a backend lacks. The real backends'
// own tests cover the same paths over shared memory, Gloo and MPI.
#include "comm/queued_process_group.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensor/factory.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(10);

QueuedProcessGroupOptions FakeOptions() {
  QueuedProcessGroupOptions options;
  options.backend = "fake";
  options.timeout = absl::Seconds(10);
  return options;
}

// Rank 0 of 2 whose calls succeed at once, except an AllReduce(max), which fails as a lost peer would.
class FakeBackend : public QueuedProcessGroup {
 public:
  FakeBackend() : QueuedProcessGroup(0, 2, FakeOptions()) {}
  ~FakeBackend() override { StopQueue(); }

  int failures_seen = 0;  // OnFailure calls (worker thread; read after a Wait)

 private:
  std::shared_ptr<Work> Run(const CollectiveSpec& spec) {
    return Issue(spec, [](const RunningCall& call) {
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
  EXPECT_TRUE(barrier->Wait(kWait).ok());
  EXPECT_EQ(group.failures_seen, 0);
}

TEST(QueuedProcessGroupTest, AFailureBreaksTheGroupAndLaterCallsNameIt) {
  FakeBackend group;
  const absl::Status failed = group.AllReduce(Zeros({3}), ReduceOp::kMax)->Wait(kWait);
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(failed.message(), "AllReduce(max) #0 of 3 float32 on rank 0/2 (fake) failed: peer gone");
  const absl::Status later = group.Barrier()->Wait(kWait);
  EXPECT_EQ(later.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(later.message(),
            "Barrier #1 on rank 0/2 (fake) not run: the group failed before (AllReduce(max) #0 of 3 float32 on rank "
            "0/2 (fake) failed: peer gone)");
  EXPECT_EQ(group.failures_seen, 1);  // the refused call did not fail anew
}

TEST(QueuedProcessGroupTest, CollectivesTheBackendLacksAreUnimplementedWithoutANumber) {
  FakeBackend group;
  const Tensor t = Zeros({3});
  const absl::Status gather = group.Gather({t, t}, t, 0)->Wait(kWait);
  EXPECT_EQ(gather.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(gather.message(), HasSubstr("Gather is not implemented by the fake backend"));
  EXPECT_EQ(group.AllToAll({t, t}, {t, t})->Wait(kWait).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(DescriptionOf(group.Barrier()), "Barrier #0 on rank 0/2 (fake)");
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
