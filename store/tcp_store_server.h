// TcpStoreServer: the TCP store's server, run on a background thread inside rank 0's process or
// inside ddprun on node 0. Clients: store/tcp_store_client.h. Protocol: store/store_protocol.h.
// Note [The store on a shared host]: what bounds it against other users of the machine is in
// tcp_store_server.cc.
#ifndef DDP_STORE_TCP_STORE_SERVER_H_
#define DDP_STORE_TCP_STORE_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "store/store_protocol.h"
#include "base/unique_fd.h"

namespace ddp {

// The default of TcpStoreServerOptions::max_store_bytes when DDP_STORE_MAX_BYTES is unset.
inline constexpr int64_t kDefaultMaxStoreBytes = int64_t{1} << 30;  // 1 GiB
// Names the variable that overrides it (a positive number of bytes).
inline constexpr char kStoreMaxBytesEnv[] = "DDP_STORE_MAX_BYTES";

// Options of TcpStoreServer::Create.
struct TcpStoreServerOptions {
  // Address to listen on, bound as given ("127.0.0.1": this host only; "0.0.0.0": every IPv4
  // interface). Any address beyond loopback requires a job token.
  std::string host = "127.0.0.1";
  // Port to listen on; 0 lets the kernel pick a free one (read it back with port()).
  int port = 0;
  // Token every client must present first. nullopt: $DDP_JOB_TOKEN, else the contents of the file
  // $DDP_JOB_TOKEN_FILE names, else no token (store/job_token.h); "": no token required.
  std::optional<std::string> job_token;
  // Size limits; a request above them is answered with an error.
  StoreProtocolLimits limits;
  // Cap on the bytes held for clients: keys, values (also those still being sent after they were
  // replaced), waiting requests' keys, and requests being received. nullopt: $DDP_STORE_MAX_BYTES when
  // set, else kDefaultMaxStoreBytes.
  std::optional<int64_t> max_store_bytes;
  // A connection that has not completed its hello within this time is closed.
  absl::Duration hello_timeout = absl::Seconds(5);
  // At most this many connections wait for their hello; one more closes the oldest of them.
  int max_pending_connections = 128;
  // At most this many connections in all; beyond, a new one closes the oldest that has not completed
  // its hello, or (when every one has) waits in the kernel's accept queue.
  int max_connections = 4096;
};

// Serves the store protocol to any number of clients from one thread with poll(). Blocking
// Get/Wait requests are parked on the server and answered when their keys appear or their timeout
// passes (no client polling). A malformed or truncated message, a bad job token or a missing hello
// closes that client's connection; a request above the limits or the memory cap gets an error naming
// them; the server itself never stops for a client.
// Thread safety: port() and the destructor may be called from any thread.
class TcpStoreServer {
 public:
  // Listens and starts the serving thread. kUnavailable when the address cannot be bound,
  // kFailedPrecondition when it is beyond loopback and there is no job token, kInvalidArgument for a
  // bad DDP_STORE_MAX_BYTES or token file.
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
