// The TCP store's wire protocol: pure encode/decode functions, no sockets (fuzzed by
// store/store_protocol_fuzz.cc).
//
//   frame    := length:u32 payload            (length = payload bytes, at most max_frame_bytes)
//   request  := op:u8 body                    (body per op below; no trailing bytes allowed)
//     kHello      version:u32 token:bytes     (must be a connection's first request)
//     kSet        key:bytes value:bytes
//     kGet        key:bytes timeout_ms:i64    (timeout_ms < 0: no timeout)
//     kAdd        key:bytes delta:i64
//     kCompareSet key:bytes expected:bytes desired:bytes
//     kDeleteKey  key:bytes
//     kWait       count:u32 key:bytes*count timeout_ms:i64
//     kNumKeys    (empty)
//   response := code:u8 message:bytes value:bytes number:i64
//   bytes    := length:u32 data
// Integers are little-endian. `code` is an absl::StatusCode; value/number carry the result
// (Get/CompareSet: value; Add/NumKeys: number; DeleteKey: number 0 or 1).
#ifndef DDP_STORE_STORE_PROTOCOL_H_
#define DDP_STORE_STORE_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ddp {

// Version sent in kHello; the server rejects other versions.
inline constexpr uint32_t kStoreProtocolVersion = 1;

// Size limits that bound what a peer can make us allocate.
struct StoreProtocolLimits {
  // Largest key.
  size_t max_key_bytes = size_t{64} << 10;  // 64 KiB
  // Largest value (and CompareSet operand, and job token).
  size_t max_value_bytes = size_t{64} << 20;  // 64 MiB
  // Most keys in one Wait.
  size_t max_wait_keys = 1024;

  // Largest frame payload these limits allow (a CompareSet with two maximal values, or a Wait with
  // max_wait_keys maximal keys, whichever is larger, plus headers).
  size_t max_frame_bytes() const;
};

// Largest frame accepted before a connection has presented its job token.
inline constexpr size_t kMaxHelloFrameBytes = size_t{64} << 10;

enum class StoreOp : uint8_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kCompareSet = 5,
  kDeleteKey = 6,
  kWait = 7,
  kNumKeys = 8,
};

// One request. Which fields an op uses is listed in the grammar above; the others stay default.
struct StoreRequest {
  StoreOp op = StoreOp::kNumKeys;
  std::vector<std::string> keys;  // One key for all ops but kWait (any number) and kHello/kNumKeys.
  std::string value;              // kSet: value; kCompareSet: expected; kHello: job token.
  std::string desired;            // kCompareSet only.
  int64_t number = 0;             // kAdd: delta; kGet/kWait: timeout in ms (<0: none); kHello: version.

  bool operator==(const StoreRequest& o) const {
    return op == o.op && keys == o.keys && value == o.value && desired == o.desired &&
           number == o.number;
  }
};

// One response.
struct StoreResponse {
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string message;  // Error message when code != kOk.
  std::string value;
  int64_t number = 0;

  bool operator==(const StoreResponse& o) const {
    return code == o.code && message == o.message && value == o.value && number == o.number;
  }
};

// Returns the whole frame (length prefix + payload) for `request`. Pure.
// REQUIRES: the request has the fields its op needs (e.g. exactly one key for kSet).
std::string EncodeRequestFrame(const StoreRequest& request);
// Returns the whole frame for `response`. Pure.
std::string EncodeResponseFrame(const StoreResponse& response);

// Decodes one request payload (without its length prefix). kInvalidArgument for an unknown op, a
// truncated or over-long body, a length above `limits`, or trailing bytes. Pure.
absl::StatusOr<StoreRequest> DecodeRequest(absl::string_view payload,
                                           const StoreProtocolLimits& limits);
// Decodes one response payload. Pure.
absl::StatusOr<StoreResponse> DecodeResponse(absl::string_view payload,
                                             const StoreProtocolLimits& limits);

// Converts between a response and an absl::Status (code + message).
StoreResponse ResponseFromStatus(const absl::Status& status);
absl::Status StatusFromResponse(const StoreResponse& response);

// Converts a Duration to the protocol's timeout_ms (-1 for infinite) and back.
int64_t TimeoutToMs(absl::Duration timeout);
absl::Duration TimeoutFromMs(int64_t timeout_ms);

// The bytes of a response frame around its value: head (length prefix, code, message, the value's
// length), then the value itself, then tail (number). head + value + tail == EncodeResponseFrame of the
// response with that value, so a server can send a large stored value without copying it. Pure.
struct ResponseFrameParts {
  std::string head;
  std::string tail;
};
// REQUIRES: response.value is empty (the value travels separately); value_size < 2^32 minus the rest.
ResponseFrameParts EncodeResponseFrameAround(const StoreResponse& response, size_t value_size);

// Splits a byte stream into frame payloads. Feed it whatever arrived with Append(), then call Next()
// until it returns nullopt. Holds at most the bytes not yet returned (a large frame's buffer is
// released once the frame is taken). Not thread-safe.
class FrameReader {
 public:
  // Frames whose announced length is above `max_frame_bytes` are an error.
  explicit FrameReader(size_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}

  // Adds received bytes (those of a frame being skipped are dropped at once).
  void Append(absl::string_view bytes);
  // Changes the limit for the frames not yet returned (e.g. after the hello).
  void set_max_frame_bytes(size_t max) { max_frame_bytes_ = max; }

  // The payload length the next frame announces, once its 4-byte header is here (whatever the
  // limit); nullopt before, and while a skipped frame's bytes are still arriving.
  std::optional<size_t> NextLength() const;
  // Drops the next frame, header and payload, including the payload bytes still to arrive.
  // REQUIRES: NextLength() has a value.
  void Skip();
  // True while the bytes of a skipped frame are still to arrive.
  bool skipping() const { return skip_remaining_ > 0; }
  // Makes room at once for a frame of `frame_bytes` (header included) starting at the next unread
  // byte, so that a large frame is received without repeated reallocation.
  void Reserve(size_t frame_bytes);

  // Returns the next complete payload, nullopt when more bytes are needed, or kInvalidArgument when
  // the next frame is longer than the limit (the stream is then unusable).
  absl::StatusOr<std::optional<std::string>> Next();

  // Bytes received but not yet returned as frames.
  size_t buffered() const { return buffer_.size() - consumed_; }

 private:
  // Drops the consumed prefix when it dominates (amortised O(n) appends) and frees a large buffer
  // once nothing in it is left.
  void Compact();

  size_t max_frame_bytes_;
  std::string buffer_;
  size_t consumed_ = 0;        // Bytes of buffer_ already returned.
  size_t skip_remaining_ = 0;  // Bytes of a skipped frame still to arrive (dropped by Append).
};

}  // namespace ddp

#endif  // DDP_STORE_STORE_PROTOCOL_H_
