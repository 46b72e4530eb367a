// TcpStore: PyTorch's TCPStore — a TCP store client that can also host the server in-process
// (rank 0 when no launcher runs the server). Pieces: store/tcp_store_server.h, tcp_store_client.h.
#ifndef DDP_STORE_TCP_STORE_H_
#define DDP_STORE_TCP_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "store/store.h"
#include "store/store_protocol.h"
#include "store/tcp_store_client.h"
#include "store/tcp_store_server.h"

namespace ddp {

// Options of TcpStore::Create.
struct TcpStoreOptions {
  // Address of the server (MASTER_ADDR).
  std::string host = "127.0.0.1";
  // Port of the server (MASTER_PORT); with is_server, 0 picks a free port (see TcpStore::port()).
  int port = 29500;
  // Start a TcpStoreServer in this process (listening on server_bind_host:port) before connecting.
  bool is_server = false;
  // Address the in-process server listens on, bound as given ("0.0.0.0": every interface; beyond
  // loopback a job token is required). InitProcessGroup passes StoreListenHost(MASTER_ADDR)
  // (store/store_exposure.h).
  std::string server_bind_host = "127.0.0.1";
  // Job token for server and client. nullopt: $DDP_JOB_TOKEN, else $DDP_JOB_TOKEN_FILE's, else none.
  std::optional<std::string> job_token;
  // The in-process server's memory cap (TcpStoreServerOptions::max_store_bytes). nullopt:
  // $DDP_STORE_MAX_BYTES, else kDefaultMaxStoreBytes.
  std::optional<int64_t> max_store_bytes;
  // How long the client keeps retrying to reach the server (and to complete its hello).
  absl::Duration connect_timeout = absl::Seconds(60);
  // How long the client waits for a response beyond the call's own timeout before declaring the
  // server dead (TcpStoreClientOptions::io_timeout).
  absl::Duration io_timeout = absl::Seconds(60);
  // Size limits, shared by server and client.
  StoreProtocolLimits limits;
};

// A Store backed by a TCP server. Thread safety: thread-safe (see TcpStoreClient).
// Owns its server (if any): destroying the TcpStore stops it, so the rank that hosts the server must
// keep its TcpStore alive until every other rank is done with the store.
class TcpStore : public Store {
 public:
  // Starts the server when options.is_server, then connects a client (retrying until
  // options.connect_timeout). kUnavailable when the server cannot listen or cannot be reached,
  // kPermissionDenied for a wrong job token, kFailedPrecondition for a server beyond loopback without
  // one (TcpStoreServer::Create).
  static absl::StatusOr<std::unique_ptr<TcpStore>> Create(TcpStoreOptions options);

  // The server's port (the picked one when is_server and port was 0).
  int port() const { return port_; }

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::StatusOr<int64_t> NumKeys() override;

 private:
  TcpStore(int port, std::unique_ptr<TcpStoreServer> server,
           std::unique_ptr<TcpStoreClient> client);

  const int port_;
  std::unique_ptr<TcpStoreServer> server_;  // Null unless is_server. Destroyed after client_.
  std::unique_ptr<TcpStoreClient> client_;
};

}  // namespace ddp

#endif  // DDP_STORE_TCP_STORE_H_
