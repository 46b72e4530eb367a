#include "store/store_protocol.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "store/byte_codec.h"
#include "base/check.h"

namespace ddp {
namespace {

std::string Frame(const std::string& payload) {
  DDP_CHECK(payload.size() <= std::numeric_limits<uint32_t>::max()) << "store frame too large";
  std::string frame;
  frame.reserve(4 + payload.size());
  AppendU32(&frame, static_cast<uint32_t>(payload.size()));
  frame += payload;
  return frame;
}

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed store message: ", what));
}

// Number of keys each op carries (-1: variable, kWait).
int KeyCount(StoreOp op) {
  switch (op) {
    case StoreOp::kHello:
    case StoreOp::kNumKeys:
      return 0;
    case StoreOp::kWait:
      return -1;
    default:
      return 1;
  }
}

bool DecodeKeys(StoreOp op, ByteReader* in, const StoreProtocolLimits& limits,
                std::vector<std::string>* keys) {
  uint32_t count = 1;
  if (KeyCount(op) == 0) return true;
  // Each key takes at least 4 bytes, so a count larger than remaining()/4 is a lie: reject it
  // before reserving anything.
  if (op == StoreOp::kWait &&
      (!in->ReadU32(&count) || count > limits.max_wait_keys || count > in->remaining() / 4)) {
    return false;
  }
  keys->resize(count);
  for (std::string& key : *keys) {
    if (!in->ReadBytes(limits.max_key_bytes, &key)) return false;
  }
  return true;
}

bool DecodeBody(ByteReader* in, const StoreProtocolLimits& limits, StoreRequest* r) {
  if (!DecodeKeys(r->op, in, limits, &r->keys)) return false;
  switch (r->op) {
    case StoreOp::kHello: {
      uint32_t version = 0;
      if (!in->ReadU32(&version)) return false;
      r->number = version;
      return in->ReadBytes(limits.max_value_bytes, &r->value);
    }
    case StoreOp::kSet:
      return in->ReadBytes(limits.max_value_bytes, &r->value);
    case StoreOp::kGet:
    case StoreOp::kAdd:
    case StoreOp::kWait:
      return in->ReadI64(&r->number);
    case StoreOp::kCompareSet:
      return in->ReadBytes(limits.max_value_bytes, &r->value) &&
             in->ReadBytes(limits.max_value_bytes, &r->desired);
    case StoreOp::kDeleteKey:
    case StoreOp::kNumKeys:
      return true;
  }
  return false;
}

}  // namespace

size_t StoreProtocolLimits::max_frame_bytes() const {
  const size_t compare_set = 1 + 3 * 4 + max_key_bytes + 2 * max_value_bytes;
  const size_t wait = 1 + 4 + max_wait_keys * (4 + max_key_bytes) + 8;
  return std::max(compare_set, wait) + 64;
}

std::string EncodeRequestFrame(const StoreRequest& r) {
  const int key_count = KeyCount(r.op);
  DDP_CHECK(key_count < 0 || static_cast<int>(r.keys.size()) == key_count)
      << "store op " << static_cast<int>(r.op) << " takes " << key_count << " key(s)";
  // Encoded in place after a length placeholder: a large value is copied once.
  size_t size = 4 + 1 + 4 + 8 + 8 + r.value.size() + r.desired.size();
  for (const std::string& key : r.keys) size += 4 + key.size();
  std::string p;
  p.reserve(size);
  AppendU32(&p, 0);
  AppendU8(&p, static_cast<uint8_t>(r.op));
  if (r.op == StoreOp::kWait) AppendU32(&p, static_cast<uint32_t>(r.keys.size()));
  for (const std::string& key : r.keys) AppendBytes(&p, key);
  switch (r.op) {
    case StoreOp::kHello:
      AppendU32(&p, static_cast<uint32_t>(r.number));
      AppendBytes(&p, r.value);
      break;
    case StoreOp::kSet:
      AppendBytes(&p, r.value);
      break;
    case StoreOp::kGet:
    case StoreOp::kAdd:
    case StoreOp::kWait:
      AppendI64(&p, r.number);
      break;
    case StoreOp::kCompareSet:
      AppendBytes(&p, r.value);
      AppendBytes(&p, r.desired);
      break;
    case StoreOp::kDeleteKey:
    case StoreOp::kNumKeys:
      break;
  }
  DDP_CHECK(p.size() - 4 <= std::numeric_limits<uint32_t>::max()) << "store frame too large";
  std::string length;
  AppendU32(&length, static_cast<uint32_t>(p.size() - 4));
  p.replace(0, 4, length);
  return p;
}

std::string EncodeResponseFrame(const StoreResponse& r) {
  std::string p;
  AppendU8(&p, static_cast<uint8_t>(r.code));
  AppendBytes(&p, r.message);
  AppendBytes(&p, r.value);
  AppendI64(&p, r.number);
  return Frame(p);
}

absl::StatusOr<StoreRequest> DecodeRequest(absl::string_view payload,
                                           const StoreProtocolLimits& limits) {
  ByteReader in(payload);
  uint8_t op = 0;
  if (!in.ReadU8(&op)) return Malformed("empty request");
  if (op < static_cast<uint8_t>(StoreOp::kHello) || op > static_cast<uint8_t>(StoreOp::kNumKeys)) {
    return Malformed(absl::StrCat("unknown op ", op));
  }
  StoreRequest request;
  request.op = static_cast<StoreOp>(op);
  if (!DecodeBody(&in, limits, &request)) {
    return Malformed(absl::StrCat("truncated or over-long body for op ", op));
  }
  if (in.remaining() != 0) return Malformed(absl::StrCat("trailing bytes after op ", op));
  return request;
}

absl::StatusOr<StoreResponse> DecodeResponse(absl::string_view payload,
                                             const StoreProtocolLimits& limits) {
  ByteReader in(payload);
  uint8_t code = 0;
  StoreResponse response;
  if (!in.ReadU8(&code) || !in.ReadBytes(limits.max_value_bytes, &response.message) ||
      !in.ReadBytes(limits.max_value_bytes, &response.value) || !in.ReadI64(&response.number)) {
    return Malformed("truncated or over-long response");
  }
  if (code > static_cast<uint8_t>(absl::StatusCode::kUnauthenticated)) {
    return Malformed(absl::StrCat("unknown status code ", code));
  }
  if (in.remaining() != 0) return Malformed("trailing bytes after response");
  response.code = static_cast<absl::StatusCode>(code);
  return response;
}

StoreResponse ResponseFromStatus(const absl::Status& status) {
  StoreResponse response;
  response.code = status.code();
  response.message = std::string(status.message());
  return response;
}

absl::Status StatusFromResponse(const StoreResponse& response) {
  return absl::Status(response.code, response.message);
}

int64_t TimeoutToMs(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return -1;
  return std::max<int64_t>(0, absl::ToInt64Milliseconds(timeout));
}

absl::Duration TimeoutFromMs(int64_t timeout_ms) {
  return timeout_ms < 0 ? absl::InfiniteDuration() : absl::Milliseconds(timeout_ms);
}

ResponseFrameParts EncodeResponseFrameAround(const StoreResponse& response, size_t value_size) {
  DDP_CHECK(response.value.empty()) << "the value travels separately";
  ResponseFrameParts parts;
  AppendI64(&parts.tail, response.number);
  std::string payload_head;
  AppendU8(&payload_head, static_cast<uint8_t>(response.code));
  AppendBytes(&payload_head, response.message);
  DDP_CHECK(value_size <= std::numeric_limits<uint32_t>::max()) << "store value too large";
  AppendU32(&payload_head, static_cast<uint32_t>(value_size));
  const size_t payload = payload_head.size() + value_size + parts.tail.size();
  DDP_CHECK(payload <= std::numeric_limits<uint32_t>::max()) << "store frame too large";
  AppendU32(&parts.head, static_cast<uint32_t>(payload));
  parts.head += payload_head;
  return parts;
}

void FrameReader::Append(absl::string_view bytes) {
  if (skip_remaining_ > 0) {
    const size_t dropped = std::min(skip_remaining_, bytes.size());
    skip_remaining_ -= dropped;
    bytes.remove_prefix(dropped);
  }
  buffer_.append(bytes.data(), bytes.size());
}

std::optional<size_t> FrameReader::NextLength() const {
  if (skip_remaining_ > 0) return std::nullopt;
  ByteReader header(absl::string_view(buffer_).substr(consumed_));
  uint32_t length = 0;
  if (!header.ReadU32(&length)) return std::nullopt;
  return length;
}

void FrameReader::Skip() {
  const std::optional<size_t> length = NextLength();
  DDP_CHECK(length.has_value()) << "FrameReader::Skip without a frame header";
  const size_t here = std::min(*length, buffered() - 4);
  consumed_ += 4 + here;
  skip_remaining_ = *length - here;
  Compact();
}

void FrameReader::Reserve(size_t frame_bytes) {
  if (consumed_ > 0) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  buffer_.reserve(std::max(buffer_.size(), frame_bytes));
}

void FrameReader::Compact() {
  constexpr size_t kKeptCapacity = size_t{64} << 10;
  if (consumed_ == buffer_.size()) {
    if (buffer_.capacity() > kKeptCapacity) {
      std::string().swap(buffer_);  // free a large frame's buffer now, not when the next one comes
    } else {
      buffer_.clear();
    }
    consumed_ = 0;
  } else if (consumed_ > 4096 && consumed_ * 2 > buffer_.size()) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
}

absl::StatusOr<std::optional<std::string>> FrameReader::Next() {
  const std::optional<size_t> length = NextLength();
  if (!length.has_value()) return std::optional<std::string>();
  if (*length > max_frame_bytes_) {
    return Malformed(absl::StrCat("frame of ", *length, " bytes exceeds the limit of ", max_frame_bytes_));
  }
  if (buffered() - 4 < *length) return std::optional<std::string>();
  std::string payload;
  if (consumed_ == 0 && buffer_.size() == 4 + *length) {
    payload = std::move(buffer_);  // the whole buffer is this frame: no copy of a large payload
    payload.erase(0, 4);
    buffer_ = std::string();
  } else {
    payload = buffer_.substr(consumed_ + 4, *length);
    consumed_ += 4 + *length;
    Compact();
  }
  return std::optional<std::string>(std::move(payload));
}

}  // namespace ddp
