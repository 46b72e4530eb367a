// libFuzzer entry point over the TCP store protocol's decoders (store/store_protocol.h).
// Properties checked on every input: decoding never crashes or over-reads, and whatever decodes
// re-encodes to a frame that decodes to the same message.
// Coverage-guided run: tools/fuzz_store_protocol.sh (clang -fsanitize=fuzzer,address).
// Without clang: //store:store_protocol_fuzz_test feeds it seeded random inputs.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "store/store_protocol.h"
#include "base/check.h"

namespace {

// Small limits so the fuzzer reaches the "too long" branches.
ddp::StoreProtocolLimits FuzzLimits() {
  ddp::StoreProtocolLimits limits;
  limits.max_key_bytes = 64;
  limits.max_value_bytes = 256;
  limits.max_wait_keys = 8;
  return limits;
}

// Decodes `payload` as a request and as a response; checks the round trip of what decodes.
void CheckPayload(const std::string& payload, const ddp::StoreProtocolLimits& limits) {
  absl::StatusOr<ddp::StoreRequest> request = ddp::DecodeRequest(payload, limits);
  if (request.ok()) {
    const std::string frame = ddp::EncodeRequestFrame(*request);
    DDP_CHECK(frame.substr(4) == payload) << "request re-encodes differently";
    absl::StatusOr<ddp::StoreRequest> again = ddp::DecodeRequest(frame.substr(4), limits);
    DDP_CHECK(again.ok() && *again == *request) << "request round trip failed";
  }
  absl::StatusOr<ddp::StoreResponse> response = ddp::DecodeResponse(payload, limits);
  if (response.ok()) {
    const std::string frame = ddp::EncodeResponseFrame(*response);
    DDP_CHECK(frame.substr(4) == payload) << "response re-encodes differently";
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ddp::StoreProtocolLimits limits = FuzzLimits();
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  // The whole input as one payload, then as a stream of frames fed in two pieces.
  CheckPayload(bytes, limits);
  ddp::FrameReader reader(limits.max_frame_bytes());
  reader.Append(absl::string_view(bytes).substr(0, size / 2));
  reader.Append(absl::string_view(bytes).substr(size / 2));
  for (int i = 0; i < 64; ++i) {
    absl::StatusOr<std::optional<std::string>> frame = reader.Next();
    if (!frame.ok() || !frame->has_value()) break;
    CheckPayload(**frame, limits);
  }
  return 0;
}
