// StoreServerState without sockets: parked Get/Wait, timeouts, errors as replies, and the cap on the bytes
// it holds (values still being sent count until they are released).
#include "store/store_server_state.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kLarge = int64_t{1} << 30;

StoreRequest Req(StoreOp op, std::vector<std::string> keys, int64_t number = 0) {
  StoreRequest r;
  r.op = op;
  r.keys = std::move(keys);
  r.number = number;
  return r;
}

StoreRequest SetReq(const std::string& key, std::string value) {
  StoreRequest r = Req(StoreOp::kSet, {key});
  r.value = std::move(value);
  return r;
}

TEST(StoreServerStateTest, GetParksUntilSetThenCompletes) {
  StoreServerState state(kLarge);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(state.Handle(1, Req(StoreOp::kGet, {"k"}, 5000), t0).has_value());
  EXPECT_EQ(state.num_parked(), 1u);
  EXPECT_EQ(state.NextDeadline(), t0 + absl::Seconds(5));
  EXPECT_TRUE(state.TakeCompletions(t0).empty());
  ASSERT_TRUE(state.Handle(2, SetReq("k", "v"), t0).has_value());
  auto done = state.TakeCompletions(t0);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].connection, 1);
  ASSERT_NE(done[0].reply.value, nullptr);
  EXPECT_EQ(*done[0].reply.value, "v");
  EXPECT_EQ(state.num_parked(), 0u);
}

TEST(StoreServerStateTest, WaitExpiresNamingMissingKeys) {
  StoreServerState state(kLarge);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(state.Handle(7, Req(StoreOp::kWait, {"x", "y"}, 100), t0).has_value());
  EXPECT_TRUE(state.TakeCompletions(t0 + absl::Milliseconds(99)).empty());
  auto done = state.TakeCompletions(t0 + absl::Milliseconds(100));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].reply.response.code, absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(done[0].reply.response.message.find("'y'"), std::string::npos);
}

TEST(StoreServerStateTest, CancelForgetsTheParkedRequest) {
  StoreServerState state(kLarge);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(state.Handle(3, Req(StoreOp::kWait, {"x"}, -1), t0).has_value());
  EXPECT_EQ(state.NextDeadline(), absl::InfiniteFuture());
  EXPECT_EQ(state.held_bytes(), 1);
  state.Cancel(3);
  EXPECT_EQ(state.num_parked(), 0u);
  EXPECT_EQ(state.held_bytes(), 0);
}

TEST(StoreServerStateTest, AddErrorsAreResponses) {
  StoreServerState state(kLarge);
  state.Handle(1, SetReq("k", "not a number"), absl::Now());
  auto reply = state.Handle(1, Req(StoreOp::kAdd, {"k"}, 1), absl::Now());
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->response.code, absl::StatusCode::kInvalidArgument);
}

TEST(StoreServerStateTest, CompareSetSharesTheCurrentValue) {
  StoreServerState state(kLarge);
  StoreRequest cas = Req(StoreOp::kCompareSet, {"k"});
  cas.desired = "first";
  auto swapped = state.Handle(1, cas, absl::Now());
  ASSERT_TRUE(swapped.has_value() && swapped->value != nullptr);
  EXPECT_EQ(*swapped->value, "first");
  cas.desired = "second";
  auto kept = state.Handle(1, cas, absl::Now());
  ASSERT_TRUE(kept.has_value() && kept->value != nullptr);
  EXPECT_EQ(*kept->value, "first");
  StoreRequest missing = Req(StoreOp::kCompareSet, {"absent"});
  missing.value = "expected";
  missing.desired = "x";
  EXPECT_EQ(*state.Handle(1, missing, absl::Now())->value, "expected");
}

// The cap counts keys and values; a Set that would pass it is refused naming the key and the cap, and a
// replacement is credited with the value it frees.
TEST(StoreServerStateTest, SetsBeyondTheCapAreRefusedByName) {
  StoreServerState state(1000);
  ASSERT_EQ(state.Handle(1, SetReq("a", std::string(600, 'x')), absl::Now())->response.code, absl::StatusCode::kOk);
  EXPECT_EQ(state.held_bytes(), 601);
  const auto refused = state.Handle(1, SetReq("b", std::string(600, 'y')), absl::Now());
  ASSERT_EQ(refused->response.code, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused->response.message, HasSubstr("the TCP store is full: Set of key 'b' (601 bytes)"));
  EXPECT_THAT(refused->response.message, HasSubstr("above its cap of 1000 bytes"));
  EXPECT_EQ(state.held_bytes(), 601) << "a refused Set changes nothing";
  // Replacing "a" frees its old value: 600 bytes fit again.
  EXPECT_EQ(state.Handle(1, SetReq("a", std::string(700, 'z')), absl::Now())->response.code, absl::StatusCode::kOk);
  EXPECT_EQ(state.held_bytes(), 701);
}

// A value still being sent (shared in a reply) stays counted after it is replaced, until released: many
// slow readers of a value that keeps changing cannot pile copies past the cap.
TEST(StoreServerStateTest, ValuesBeingSentStayCountedUntilReleased) {
  StoreServerState state(1000);
  state.Handle(1, SetReq("k", std::string(400, 'x')), absl::Now());
  std::optional<StoreServerState::Reply> sending = state.Handle(2, Req(StoreOp::kGet, {"k"}, 0), absl::Now());
  ASSERT_TRUE(sending.has_value() && sending->value != nullptr);
  EXPECT_EQ(state.Handle(1, SetReq("k", std::string(400, 'y')), absl::Now())->response.code, absl::StatusCode::kOk);
  EXPECT_EQ(state.held_bytes(), 801) << "the old value is still being sent";
  EXPECT_EQ(state.Handle(1, SetReq("m", std::string(300, 'z')), absl::Now())->response.code,
            absl::StatusCode::kResourceExhausted);
  sending.reset();  // sent
  EXPECT_EQ(state.held_bytes(), 401);
  EXPECT_EQ(state.Handle(1, SetReq("m", std::string(300, 'z')), absl::Now())->response.code, absl::StatusCode::kOk);
}

}  // namespace
}  // namespace ddp
