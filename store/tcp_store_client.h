// TcpStoreClient: a Store that talks to a TcpStoreServer (store/tcp_store_server.h).
#ifndef DDP_STORE_TCP_STORE_CLIENT_H_
#define DDP_STORE_TCP_STORE_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "store/store.h"
#include "store/store_protocol.h"
#include "base/unique_fd.h"

namespace ddp {

// Options of TcpStoreClient::Create.
struct TcpStoreClientOptions {
  // Server address (name or numeric).
  std::string host = "127.0.0.1";
  // Server port.
  int port = 29500;
  // Token presented to the server. nullopt: $DDP_JOB_TOKEN, else the file $DDP_JOB_TOKEN_FILE names,
  // else none (store/job_token.h); "": none.
  std::optional<std::string> job_token;
  // How long to keep retrying to connect (exponential backoff from 10 ms to 1 s) before failing;
  // the server may start after its clients. It bounds the hello too: a peer that accepts the
  // connection but never answers fails Connect within this time.
  absl::Duration connect_timeout = absl::Seconds(60);
  // How long to wait for a response beyond the call's own timeout (Get/Wait) before declaring the
  // server dead.
  absl::Duration io_timeout = absl::Seconds(60);
  // Size limits; must match the server's.
  StoreProtocolLimits limits;
};

// A Store client. Blocking Get/Wait are parked on the server (no polling over the network).
// Thread safety: thread-safe. Each call borrows a connection from a small pool and opens a new one
// when all are busy, so a thread blocked in Get never delays another thread's Set.
// Errors: kUnavailable when the server is unreachable or the connection breaks (the call is not
// retried, since Add is not idempotent), kPermissionDenied for a wrong job token, kInvalidArgument for
// a key or value above options.limits (before anything is sent), kResourceExhausted when the server's
// memory cap would be passed (store/tcp_store_server.h).
class TcpStoreClient : public Store {
 public:
  // Connects (retrying until options.connect_timeout) and presents the job token. Errors name the
  // server's host:port; kInvalidArgument for an unreadable DDP_JOB_TOKEN_FILE.
  static absl::StatusOr<std::unique_ptr<TcpStoreClient>> Create(TcpStoreClientOptions options);

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::StatusOr<int64_t> NumKeys() override;

 private:
  TcpStoreClient(TcpStoreClientOptions options, std::string token);

  // Opens a connection with retries and completes the hello.
  absl::StatusOr<UniqueFd> Connect() const;
  // Sends `request` on one connection and returns the decoded response, or its error status.
  // `wait` is how long the server may legitimately take (the Get/Wait timeout).
  absl::StatusOr<StoreResponse> Call(const StoreRequest& request, absl::Duration wait);
  // One request/response exchange on `fd`.
  absl::StatusOr<StoreResponse> Exchange(int fd, const StoreRequest& request,
                                         absl::Time deadline) const;

  const TcpStoreClientOptions options_;
  const std::string token_;
  absl::Mutex mu_;
  std::vector<UniqueFd> idle_ ABSL_GUARDED_BY(mu_);  // Healthy connections not in use.
};

}  // namespace ddp

#endif  // DDP_STORE_TCP_STORE_CLIENT_H_
