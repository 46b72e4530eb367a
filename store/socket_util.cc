#include "store/socket_util.h"

#include <signal.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ddp {

void IgnoreSigpipeIfDefault() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
}
namespace {

absl::Status SocketError(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Waits for `events` on `fd` until `deadline`; kDeadlineExceeded on timeout.
absl::Status PollFor(int fd, short events, absl::Time deadline, absl::string_view what) {
  while (true) {
    pollfd p = {fd, events, 0};
    int r = ::poll(&p, 1, PollTimeoutMs(deadline));
    if (r > 0) return absl::OkStatus();
    if (r < 0 && errno != EINTR) return SocketError(absl::StrCat(what, ": poll"));
    if (r == 0 && absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
    }
  }
}

// Non-blocking connect of one address, finished with poll() before `deadline`.
absl::StatusOr<UniqueFd> ConnectAddress(const addrinfo* ai, absl::Time deadline) {
  UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
  if (!fd.valid()) return SocketError("socket");
  DDP_RETURN_IF_ERROR(SetNonBlocking(fd.get(), true));
  if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return SocketError("connect");
    DDP_RETURN_IF_ERROR(PollFor(fd.get(), POLLOUT, deadline, "connect"));
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      errno = err;
      return SocketError("connect");
    }
  }
  DDP_RETURN_IF_ERROR(SetNonBlocking(fd.get(), false));
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

int PollTimeoutMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  // Round up so a poll never returns just before the deadline and spins.
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

absl::Status SetNonBlocking(int fd, bool non_blocking) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0) return SocketError("fcntl");
  flags = non_blocking ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (::fcntl(fd, F_SETFL, flags) != 0) return SocketError("fcntl");
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> ConnectTcp(const std::string& host, int port, absl::Time deadline) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const std::string service = absl::StrCat(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", host, "': ", ::gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError("no address");
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    absl::StatusOr<UniqueFd> fd = ConnectAddress(ai, deadline);
    if (fd.ok()) {
      ::freeaddrinfo(list);
      return fd;
    }
    last = fd.status();
  }
  ::freeaddrinfo(list);
  return absl::UnavailableError(
      absl::StrCat("cannot connect to ", host, ":", port, ": ", last.message()));
}

absl::StatusOr<UniqueFd> ListenTcp(const std::string& host, int port, int backlog) {
  addrinfo hints = {};
  hints.ai_family = host.empty() || host == "0.0.0.0" ? AF_INET : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* list = nullptr;
  const std::string service = absl::StrCat(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", host, "': ", ::gai_strerror(rc)));
  }
  UniqueFd fd(::socket(list->ai_family, list->ai_socktype | SOCK_CLOEXEC, list->ai_protocol));
  int one = 1;
  const bool ok = fd.valid() &&
                  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
                  ::bind(fd.get(), list->ai_addr, list->ai_addrlen) == 0 &&
                  ::listen(fd.get(), backlog) == 0;
  ::freeaddrinfo(list);
  if (!ok) return SocketError(absl::StrCat("cannot listen on ", host, ":", port));
  DDP_RETURN_IF_ERROR(SetNonBlocking(fd.get(), true));
  return fd;
}

absl::StatusOr<int> LocalPort(int fd) {
  sockaddr_storage addr = {};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return SocketError("getsockname");
  }
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

absl::StatusOr<int> PickFreePort() {
  DDP_ASSIGN_OR_RETURN(UniqueFd fd, ListenTcp("0.0.0.0", 0, 1));
  return LocalPort(fd.get());
}

absl::Status SendAll(int fd, absl::string_view data, absl::Time deadline) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      DDP_RETURN_IF_ERROR(PollFor(fd, POLLOUT, deadline, "send"));
    } else if (n < 0 && errno != EINTR) {
      return SocketError("send");
    }
  }
  return absl::OkStatus();
}

absl::Status RecvExact(int fd, size_t n, std::string* out, absl::Time deadline) {
  out->resize(n);
  size_t done = 0;
  while (done < n) {
    DDP_RETURN_IF_ERROR(PollFor(fd, POLLIN, deadline, "receive"));
    ssize_t r = ::recv(fd, out->data() + done, n - done, MSG_DONTWAIT);
    if (r == 0) return absl::UnavailableError("receive: connection closed by peer");
    if (r > 0) {
      done += static_cast<size_t>(r);
    } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return SocketError("receive");
    }
  }
  return absl::OkStatus();
}

}  // namespace ddp
