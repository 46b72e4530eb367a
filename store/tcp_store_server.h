// TcpStoreServer: the TCP store's server, run on a background thread inside rank 0's process or
// inside ddprun on node 0. Clients: store/tcp_store_client.h. Protocol: store/store_protocol.h.
#ifndef DDP_STORE_TCP_STORE_SERVER_H_
#define DDP_STORE_TCP_STORE_SERVER_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "store/store_protocol.h"
#include "base/unique_fd.h"

namespace ddp {

// Options of TcpStoreServer::Create.
struct TcpStoreServerOptions {
  // Address to listen on; "0.0.0.0" listens on every IPv4 interface.
  std::string host = "0.0.0.0";
  // Port to listen on; 0 lets the kernel pick a free one (read it back with port()).
  int port = 0;
  // Token every client must present first. nullopt: use $DDP_JOB_TOKEN when set, else no token;
  // "": no token required.
  std::optional<std::string> job_token;
  // Size limits; a message above them closes its connection.
  StoreProtocolLimits limits;
  // A connection that has not completed its hello within this time is closed.
  absl::Duration hello_timeout = absl::Seconds(30);
  // Connections beyond this many wait in the kernel's accept queue.
  int max_connections = 4096;
};

// Serves the store protocol to any number of clients from one thread with poll(). Blocking
// Get/Wait requests are parked on the server and answered when their keys appear or their timeout
// passes (no client polling). A malformed, oversized or truncated message, a bad job token or a
// missing hello closes that client's connection; the server itself never stops for a client.
// Thread safety: port() and the destructor may be called from any thread.
class TcpStoreServer {
 public:
  // Listens and starts the serving thread. kUnavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Create(TcpStoreServerOptions options);

  // Stops the thread and closes every connection (clients then see kUnavailable).
  ~TcpStoreServer();

  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The port the server listens on (the picked one when options.port was 0).
  int port() const { return port_; }

 private:
  class Loop;

  TcpStoreServer(int port, UniqueFd wake_write, std::unique_ptr<Loop> loop);

  const int port_;
  UniqueFd wake_write_;  // Writing a byte here wakes the loop so that it sees stop_.
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace ddp

#endif  // DDP_STORE_TCP_STORE_SERVER_H_
