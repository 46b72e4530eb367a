#include "store/store_server_state.h"

#include "gtest/gtest.h"

namespace ddp {
namespace {

StoreRequest Req(StoreOp op, std::vector<std::string> keys, int64_t number = 0) {
  StoreRequest r;
  r.op = op;
  r.keys = std::move(keys);
  r.number = number;
  return r;
}

TEST(StoreServerStateTest, GetParksUntilSetThenCompletes) {
  StoreServerState state;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(state.Handle(1, Req(StoreOp::kGet, {"k"}, 5000), t0).has_value());
  EXPECT_EQ(state.num_parked(), 1u);
  EXPECT_EQ(state.NextDeadline(), t0 + absl::Seconds(5));
  EXPECT_TRUE(state.TakeCompletions(t0).empty());
  StoreRequest set = Req(StoreOp::kSet, {"k"});
  set.value = "v";
  ASSERT_TRUE(state.Handle(2, set, t0).has_value());
  auto done = state.TakeCompletions(t0);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].connection, 1);
  EXPECT_EQ(done[0].response.value, "v");
  EXPECT_EQ(state.num_parked(), 0u);
}

TEST(StoreServerStateTest, WaitExpiresNamingMissingKeys) {
  StoreServerState state;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(state.Handle(7, Req(StoreOp::kWait, {"x", "y"}, 100), t0).has_value());
  EXPECT_TRUE(state.TakeCompletions(t0 + absl::Milliseconds(99)).empty());
  auto done = state.TakeCompletions(t0 + absl::Milliseconds(100));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].response.code, absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(done[0].response.message.find("'y'"), std::string::npos);
}

TEST(StoreServerStateTest, CancelForgetsTheParkedRequest) {
  StoreServerState state;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(state.Handle(3, Req(StoreOp::kWait, {"x"}, -1), t0).has_value());
  EXPECT_EQ(state.NextDeadline(), absl::InfiniteFuture());
  state.Cancel(3);
  EXPECT_EQ(state.num_parked(), 0u);
}

TEST(StoreServerStateTest, AddErrorsAreResponses) {
  StoreServerState state;
  StoreRequest set = Req(StoreOp::kSet, {"k"});
  set.value = "not a number";
  state.Handle(1, set, absl::Now());
  auto response = state.Handle(1, Req(StoreOp::kAdd, {"k"}, 1), absl::Now());
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->code, absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ddp
