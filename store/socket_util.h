// Small TCP helpers over POSIX sockets with deadlines, for the TCP store client and server.
#ifndef DDP_STORE_SOCKET_UTIL_H_
#define DDP_STORE_SOCKET_UTIL_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"

namespace ddp {

// Makes one attempt to connect to host:port (name or numeric, IPv4 or IPv6), giving up at
// `deadline`. Returns a blocking socket with TCP_NODELAY. kUnavailable on failure.
// Sets SIGPIPE to ignored when it still has its default action (which kills the process silently on a
// write to a socket whose peer died; Gloo writes with writev, which cannot pass MSG_NOSIGNAL). A failed
// write then returns EPIPE and becomes an error naming the collective. Programs that installed their own
// SIGPIPE handler keep it. Thread-safe; called by ProcessGroupGloo::Create and InitProcessGroup.
void IgnoreSigpipeIfDefault();

absl::StatusOr<UniqueFd> ConnectTcp(const std::string& host, int port, absl::Time deadline);

// Creates a listening, non-blocking socket bound to host:port (port 0: the kernel picks a free one;
// host "0.0.0.0" or "" : every IPv4 interface). kUnavailable when the address is in use.
absl::StatusOr<UniqueFd> ListenTcp(const std::string& host, int port, int backlog);

// Returns the local port a socket is bound to.
absl::StatusOr<int> LocalPort(int fd);

// A TCP port free on every IPv4 interface of this host now (bound, read and closed: another process may
// take it before the caller binds it, as with torchrun's own pick).
absl::StatusOr<int> PickFreePort();

// Sets or clears O_NONBLOCK.
absl::Status SetNonBlocking(int fd, bool non_blocking);

// Writes all of `data` to a socket (blocking or not), waiting with poll() up to `deadline`.
// Never raises SIGPIPE. kUnavailable when the peer is gone, kDeadlineExceeded on timeout.
absl::Status SendAll(int fd, absl::string_view data, absl::Time deadline);

// Reads exactly `n` bytes into `out`, waiting with poll() up to `deadline`. kUnavailable when the
// peer closes first, kDeadlineExceeded on timeout.
absl::Status RecvExact(int fd, size_t n, std::string* out, absl::Time deadline);

// Milliseconds until `deadline` for poll(): -1 for an infinite deadline, 0 when past, and at most
// INT_MAX.
int PollTimeoutMs(absl::Time deadline);

}  // namespace ddp

#endif  // DDP_STORE_SOCKET_UTIL_H_
