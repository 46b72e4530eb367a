#include "store/tcp_store_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "store/byte_codec.h"
#include "store/job_token.h"
#include "store/socket_util.h"
#include "base/check.h"

namespace ddp {
namespace {

StoreRequest MakeRequest(StoreOp op, std::vector<std::string> keys) {
  StoreRequest request;
  request.op = op;
  request.keys = std::move(keys);
  return request;
}

// Rejects before sending what the server would drop the connection for.
absl::Status CheckSizes(const StoreRequest& request, const StoreProtocolLimits& limits) {
  if (request.keys.size() > limits.max_wait_keys) {
    return absl::InvalidArgumentError(absl::StrCat("store Wait on ", request.keys.size(),
                                                   " keys exceeds max_wait_keys ",
                                                   limits.max_wait_keys));
  }
  for (const std::string& key : request.keys) {
    if (key.size() > limits.max_key_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("store key of ", key.size(),
                                                     " bytes exceeds max_key_bytes ",
                                                     limits.max_key_bytes));
    }
  }
  const size_t value_bytes = std::max(request.value.size(), request.desired.size());
  if (value_bytes > limits.max_value_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store value of ", value_bytes, " bytes for key '", absl::CHexEscape(request.keys[0].substr(0, 200)),
        "' is above the store's limit of ", limits.max_value_bytes, " bytes per value"));
  }
  return absl::OkStatus();
}

}  // namespace

TcpStoreClient::TcpStoreClient(TcpStoreClientOptions options, std::string token)
    : options_(std::move(options)), token_(std::move(token)) {}

absl::StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Create(
    TcpStoreClientOptions options) {
  DDP_ASSIGN_OR_RETURN(std::string token, ResolveJobToken(options.job_token));
  std::unique_ptr<TcpStoreClient> client(new TcpStoreClient(std::move(options), std::move(token)));
  DDP_ASSIGN_OR_RETURN(UniqueFd fd, client->Connect());
  absl::MutexLock lock(&client->mu_);
  client->idle_.push_back(std::move(fd));
  return client;
}

absl::StatusOr<UniqueFd> TcpStoreClient::Connect() const {
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  absl::Duration backoff = absl::Milliseconds(10);
  absl::Status last;
  while (true) {
    absl::StatusOr<UniqueFd> fd = ConnectTcp(options_.host, options_.port, deadline);
    if (fd.ok()) {
      StoreRequest hello = MakeRequest(StoreOp::kHello, {});
      hello.number = kStoreProtocolVersion;
      hello.value = token_;
      // A peer that accepts and never answers (another service on the port) costs at most what is
      // left of connect_timeout, which the error below names.
      absl::StatusOr<StoreResponse> response =
          Exchange(fd->get(), hello, std::min(deadline, absl::Now() + options_.io_timeout));
      if (response.ok() && response->code == absl::StatusCode::kOk) return fd;
      // A refused token or version is final; a broken hello is retried like a refused connect.
      if (response.ok()) {
        const absl::Status refused = StatusFromResponse(*response);
        return absl::Status(refused.code(), absl::StrCat("TCP store at ", options_.host, ":", options_.port, ": ",
                                                         refused.message()));
      }
      last = response.status();
    } else {
      last = fd.status();
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "cannot reach the TCP store at ", options_.host, ":", options_.port, " within ",
          absl::FormatDuration(options_.connect_timeout), ": ", last.message()));
    }
    absl::SleepFor(std::min(backoff, deadline - now));
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

absl::StatusOr<StoreResponse> TcpStoreClient::Exchange(int fd, const StoreRequest& request,
                                                       absl::Time deadline) const {
  DDP_RETURN_IF_ERROR(SendAll(fd, EncodeRequestFrame(request), deadline));
  std::string header;
  DDP_RETURN_IF_ERROR(RecvExact(fd, 4, &header, deadline));
  uint32_t length = 0;
  ByteReader(header).ReadU32(&length);
  if (length > options_.limits.max_frame_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("response frame of ", length, " bytes"));
  }
  std::string payload;
  DDP_RETURN_IF_ERROR(RecvExact(fd, length, &payload, deadline));
  return DecodeResponse(payload, options_.limits);
}

absl::StatusOr<StoreResponse> TcpStoreClient::Call(const StoreRequest& request,
                                                   absl::Duration wait) {
  DDP_RETURN_IF_ERROR(CheckSizes(request, options_.limits));
  UniqueFd fd;
  {
    absl::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      fd = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!fd.valid()) {
    DDP_ASSIGN_OR_RETURN(fd, Connect());
  }
  absl::StatusOr<StoreResponse> response =
      Exchange(fd.get(), request, absl::Now() + wait + options_.io_timeout);
  if (!response.ok()) {  // The connection is in an unknown state: drop it.
    return absl::UnavailableError(absl::StrCat("TCP store at ", options_.host, ":", options_.port,
                                               ": ", response.status().message()));
  }
  {
    absl::MutexLock lock(&mu_);
    idle_.push_back(std::move(fd));
  }
  if (response->code != absl::StatusCode::kOk) return StatusFromResponse(*response);
  return response;
}

absl::Status TcpStoreClient::Set(absl::string_view key, absl::string_view value) {
  StoreRequest request = MakeRequest(StoreOp::kSet, {std::string(key)});
  request.value = std::string(value);
  return Call(request, absl::ZeroDuration()).status();
}

absl::StatusOr<std::string> TcpStoreClient::Get(absl::string_view key, absl::Duration timeout) {
  StoreRequest request = MakeRequest(StoreOp::kGet, {std::string(key)});
  request.number = TimeoutToMs(timeout);
  DDP_ASSIGN_OR_RETURN(StoreResponse response, Call(request, timeout));
  return std::move(response.value);
}

absl::StatusOr<int64_t> TcpStoreClient::Add(absl::string_view key, int64_t delta) {
  StoreRequest request = MakeRequest(StoreOp::kAdd, {std::string(key)});
  request.number = delta;
  DDP_ASSIGN_OR_RETURN(StoreResponse response, Call(request, absl::ZeroDuration()));
  return response.number;
}

absl::StatusOr<std::string> TcpStoreClient::CompareSet(absl::string_view key,
                                                       absl::string_view expected,
                                                       absl::string_view desired) {
  StoreRequest request = MakeRequest(StoreOp::kCompareSet, {std::string(key)});
  request.value = std::string(expected);
  request.desired = std::string(desired);
  DDP_ASSIGN_OR_RETURN(StoreResponse response, Call(request, absl::ZeroDuration()));
  return std::move(response.value);
}

absl::StatusOr<bool> TcpStoreClient::DeleteKey(absl::string_view key) {
  StoreRequest request = MakeRequest(StoreOp::kDeleteKey, {std::string(key)});
  DDP_ASSIGN_OR_RETURN(StoreResponse response, Call(request, absl::ZeroDuration()));
  return response.number != 0;
}

absl::Status TcpStoreClient::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  StoreRequest request = MakeRequest(StoreOp::kWait, std::vector<std::string>(keys.begin(), keys.end()));
  request.number = TimeoutToMs(timeout);
  return Call(request, timeout).status();
}

absl::StatusOr<int64_t> TcpStoreClient::NumKeys() {
  DDP_ASSIGN_OR_RETURN(StoreResponse response,
                       Call(MakeRequest(StoreOp::kNumKeys, {}), absl::ZeroDuration()));
  return response.number;
}

}  // namespace ddp
