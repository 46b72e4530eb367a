#include "store/store_protocol.h"

#include <string>

#include "gtest/gtest.h"

namespace ddp {
namespace {

StoreRequest Request(StoreOp op, std::vector<std::string> keys) {
  StoreRequest r;
  r.op = op;
  r.keys = std::move(keys);
  return r;
}

std::vector<StoreRequest> SampleRequests() {
  std::vector<StoreRequest> all;
  StoreRequest hello = Request(StoreOp::kHello, {});
  hello.number = kStoreProtocolVersion;
  hello.value = "token";
  all.push_back(hello);
  StoreRequest set = Request(StoreOp::kSet, {"k"});
  set.value = std::string("v\0w", 3);
  all.push_back(set);
  StoreRequest get = Request(StoreOp::kGet, {"k"});
  get.number = -1;
  all.push_back(get);
  StoreRequest add = Request(StoreOp::kAdd, {"n"});
  add.number = -7;
  all.push_back(add);
  StoreRequest cas = Request(StoreOp::kCompareSet, {"c"});
  cas.value = "old";
  cas.desired = "new";
  all.push_back(cas);
  all.push_back(Request(StoreOp::kDeleteKey, {"d"}));
  StoreRequest wait = Request(StoreOp::kWait, {"a", "b", ""});
  wait.number = 1500;
  all.push_back(wait);
  all.push_back(Request(StoreOp::kNumKeys, {}));
  return all;
}

TEST(StoreProtocolTest, EveryRequestRoundTrips) {
  StoreProtocolLimits limits;
  for (const StoreRequest& request : SampleRequests()) {
    const std::string frame = EncodeRequestFrame(request);
    FrameReader reader(limits.max_frame_bytes());
    reader.Append(frame);
    auto payload = reader.Next();
    ASSERT_TRUE(payload.ok() && payload->has_value());
    absl::StatusOr<StoreRequest> decoded = DecodeRequest(**payload, limits);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, request) << static_cast<int>(request.op);
  }
}

TEST(StoreProtocolTest, ResponseRoundTrips) {
  StoreResponse response = ResponseFromStatus(absl::DeadlineExceededError("late"));
  response.value = "x";
  response.number = 42;
  const std::string frame = EncodeResponseFrame(response);
  absl::StatusOr<StoreResponse> decoded = DecodeResponse(frame.substr(4), StoreProtocolLimits());
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, response);
  EXPECT_EQ(StatusFromResponse(*decoded).code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(StoreProtocolTest, EveryTruncationIsRejected) {
  StoreProtocolLimits limits;
  for (const StoreRequest& request : SampleRequests()) {
    const std::string payload = EncodeRequestFrame(request).substr(4);
    for (size_t n = 0; n < payload.size(); ++n) {
      EXPECT_FALSE(DecodeRequest(payload.substr(0, n), limits).ok())
          << "op " << static_cast<int>(request.op) << " cut at " << n;
    }
    EXPECT_FALSE(DecodeRequest(payload + "x", limits).ok()) << "trailing byte accepted";
  }
}

TEST(StoreProtocolTest, LimitsAreEnforced) {
  StoreProtocolLimits limits;
  limits.max_key_bytes = 4;
  limits.max_value_bytes = 8;
  limits.max_wait_keys = 2;
  StoreRequest set = Request(StoreOp::kSet, {"12345"});
  EXPECT_FALSE(DecodeRequest(EncodeRequestFrame(set).substr(4), limits).ok());
  set.keys = {"1234"};
  set.value = "123456789";
  EXPECT_FALSE(DecodeRequest(EncodeRequestFrame(set).substr(4), limits).ok());
  StoreRequest wait = Request(StoreOp::kWait, {"a", "b", "c"});
  EXPECT_FALSE(DecodeRequest(EncodeRequestFrame(wait).substr(4), limits).ok());
}

TEST(StoreProtocolTest, UnknownOpAndHugeWaitCountAreRejected) {
  StoreProtocolLimits limits;
  EXPECT_FALSE(DecodeRequest(std::string("\x00", 1), limits).ok());
  EXPECT_FALSE(DecodeRequest(std::string("\x09", 1), limits).ok());
  EXPECT_FALSE(DecodeRequest("", limits).ok());
  // kWait claiming 1000 keys in a 5-byte body.
  EXPECT_FALSE(DecodeRequest(std::string("\x07\xe8\x03\x00\x00", 5), limits).ok());
}

TEST(FrameReaderTest, ReassemblesFramesSplitAnywhere) {
  std::string stream;
  for (const char* v : {"one", "", "three"}) {
    StoreRequest set = Request(StoreOp::kSet, {"k"});
    set.value = v;
    stream += EncodeRequestFrame(set);
  }
  FrameReader reader(1024);
  int frames = 0;
  for (char c : stream) {  // One byte at a time.
    reader.Append(absl::string_view(&c, 1));
    while (true) {
      auto next = reader.Next();
      ASSERT_TRUE(next.ok());
      if (!next->has_value()) break;
      ++frames;
    }
  }
  EXPECT_EQ(frames, 3);
  EXPECT_EQ(reader.buffered(), 0u);
}

TEST(FrameReaderTest, OversizedFrameIsAnErrorBeforeItsBytesArrive) {
  FrameReader reader(100);
  reader.Append(std::string("\x65\x00\x00\x00", 4));  // 101 bytes announced.
  EXPECT_FALSE(reader.Next().ok());
}

// A skipped frame's bytes are dropped as they arrive, however they are split, and the frames after it
// come through intact.
TEST(FrameReaderTest, SkipDropsAFrameIncludingBytesStillToArrive) {
  StoreRequest big = Request(StoreOp::kSet, {"k"});
  big.value = std::string(10000, 'x');
  StoreRequest small = Request(StoreOp::kSet, {"k"});
  small.value = "after";
  const std::string stream = EncodeRequestFrame(big) + EncodeRequestFrame(small);
  FrameReader reader(1 << 20);
  EXPECT_FALSE(reader.NextLength().has_value());
  reader.Append(stream.substr(0, 100));
  ASSERT_TRUE(reader.NextLength().has_value());
  EXPECT_EQ(*reader.NextLength(), EncodeRequestFrame(big).size() - 4);
  reader.Skip();
  EXPECT_TRUE(reader.skipping());
  EXPECT_FALSE(reader.NextLength().has_value());
  for (size_t at = 100; at < stream.size(); at += 777) reader.Append(stream.substr(at, 777));
  EXPECT_FALSE(reader.skipping());
  auto next = reader.Next();
  ASSERT_TRUE(next.ok() && next->has_value());
  EXPECT_EQ(*DecodeRequest(**next, StoreProtocolLimits()), small);
  EXPECT_EQ(reader.buffered(), 0u);
}

TEST(FrameReaderTest, ReservedLargeFrameComesOutWhole) {
  StoreRequest big = Request(StoreOp::kSet, {"k"});
  big.value = std::string(300000, 'y');
  const std::string frame = EncodeRequestFrame(big);
  FrameReader reader(1 << 20);
  reader.Append(frame.substr(0, 10));
  reader.Reserve(frame.size());
  reader.Append(frame.substr(10));
  auto next = reader.Next();
  ASSERT_TRUE(next.ok() && next->has_value());
  EXPECT_EQ(*DecodeRequest(**next, StoreProtocolLimits()), big);
  EXPECT_EQ(reader.buffered(), 0u);
}

// The parts a server sends around a shared value are exactly the response's frame.
TEST(StoreProtocolTest, ResponsePartsAroundAValueMatchTheWholeFrame) {
  for (const std::string& value : {std::string(), std::string("v"), std::string(70000, 'z')}) {
    StoreResponse response;
    response.code = absl::StatusCode::kNotFound;
    response.message = "msg";
    response.number = -42;
    const ResponseFrameParts parts = EncodeResponseFrameAround(response, value.size());
    response.value = value;
    EXPECT_EQ(parts.head + value + parts.tail, EncodeResponseFrame(response));
  }
}

TEST(StoreProtocolTest, TimeoutConversion) {
  EXPECT_EQ(TimeoutToMs(absl::InfiniteDuration()), -1);
  EXPECT_EQ(TimeoutToMs(absl::Milliseconds(250)), 250);
  EXPECT_EQ(TimeoutFromMs(-1), absl::InfiniteDuration());
  EXPECT_EQ(TimeoutFromMs(5), absl::Milliseconds(5));
}

}  // namespace
}  // namespace ddp
