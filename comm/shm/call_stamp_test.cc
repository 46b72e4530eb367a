#include "comm/shm/call_stamp.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tensor/tensor.h"

namespace ddp {
namespace {

CollectiveSpec Spec(CollectiveKind kind, ReduceOp op, int root, int64_t numel, DType dtype) {
  CollectiveSpec spec;
  spec.kind = kind;
  spec.op = op;
  spec.root = root;
  spec.numel = numel;
  spec.dtype = dtype;
  return spec;
}

// The stamp of `spec` as a group's first call.
uint32_t FirstStamp(const CollectiveSpec& spec) { return ShmCallHistory().Stamp(spec, 0).stamp; }

TEST(CallStampTest, EqualCallsGetEqualStampsAndEachFieldChangesIt) {
  const CollectiveSpec base = Spec(CollectiveKind::kAllReduce, ReduceOp::kSum, -1, 1000, DType::kFloat32);
  EXPECT_EQ(FirstStamp(base), FirstStamp(base));
  EXPECT_NE(FirstStamp(base), FirstStamp(Spec(CollectiveKind::kReduce, ReduceOp::kSum, -1, 1000, DType::kFloat32)));
  EXPECT_NE(FirstStamp(base), FirstStamp(Spec(CollectiveKind::kAllReduce, ReduceOp::kMax, -1, 1000, DType::kFloat32)));
  EXPECT_NE(FirstStamp(base), FirstStamp(Spec(CollectiveKind::kAllReduce, ReduceOp::kSum, 0, 1000, DType::kFloat32)));
  EXPECT_NE(FirstStamp(base), FirstStamp(Spec(CollectiveKind::kAllReduce, ReduceOp::kSum, -1, 1001, DType::kFloat32)));
  EXPECT_NE(FirstStamp(base), FirstStamp(Spec(CollectiveKind::kAllReduce, ReduceOp::kSum, -1, 1000, DType::kInt64)));
}

TEST(CallStampTest, AStampCoversTheCallsBeforeIt) {
  const CollectiveSpec call = Spec(CollectiveKind::kAllReduce, ReduceOp::kSum, -1, 4, DType::kFloat32);
  ShmCallHistory a, b, c;
  a.Stamp(Spec(CollectiveKind::kBroadcast, ReduceOp::kSum, 0, 4, DType::kFloat32), 0);
  b.Stamp(Spec(CollectiveKind::kBroadcast, ReduceOp::kSum, 1, 4, DType::kFloat32), 0);
  c.Stamp(Spec(CollectiveKind::kBroadcast, ReduceOp::kSum, 0, 4, DType::kFloat32), 0);
  const uint32_t after_a = a.Stamp(call, 1).stamp;
  EXPECT_NE(after_a, b.Stamp(call, 1).stamp);
  EXPECT_EQ(after_a, c.Stamp(call, 1).stamp);
  EXPECT_NE(after_a, FirstStamp(call));
}

TEST(CallStampTest, TheMismatchErrorNamesBothCalls) {
  ShmCallHistory mine_history, theirs_history;
  const ShmCallStamp mine =
      mine_history.Stamp(Spec(CollectiveKind::kAllReduce, ReduceOp::kSum, -1, 1000, DType::kFloat32), 7);
  const ShmCallStamp theirs = theirs_history.Stamp(Spec(CollectiveKind::kBroadcast, ReduceOp::kSum, 0, 3, DType::kInt64), 7);
  const absl::Status status = CallMismatchError("AllReduce(sum) #7 of 1000 float32 on rank 1/2 (shm) failed", 1, 2,
                                                mine, 0, theirs.record);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "AllReduce(sum) #7 of 1000 float32 on rank 1/2 (shm) failed: rank 0 called Broadcast(root 0) #7 of 3 int64 "
            "on rank 0/2 (shm) at this point; ranks must issue the same collectives in the same order");
}

TEST(CallStampTest, ARecordFromAnotherBuildIsNamedUnrecognised) {
  const ShmCallStamp mine = ShmCallHistory().Stamp(Spec(CollectiveKind::kBarrier, ReduceOp::kSum, -1, 0, DType::kFloat32), 0);
  ShmCallRecord garbage{};
  garbage[2] = uint64_t{0xff} | uint64_t{1} << 24;  // recorded, with a kind this build does not know
  const absl::Status status = CallMismatchError("Barrier #0 on rank 0/2 (shm) failed", 0, 2, mine, 1, garbage);
  EXPECT_TRUE(absl::StrContains(status.message(), "rank 1 called an unrecognised call")) << status;
}

}  // namespace
}  // namespace ddp
