#include "store/tcp_store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "store/job_token.h"
#include "store/socket_util.h"
#include "store/store_server_state.h"
#include "base/check.h"

namespace ddp {

// The event loop: one thread, poll() over the wake pipe, the listening socket and every client.
// Each client has at most one request in flight; while it is parked (Get/Wait) or its response is
// still being written, its socket is not read (back-pressure), only watched for hang-up.
class TcpStoreServer::Loop {
 public:
  Loop(TcpStoreServerOptions options, std::string token, UniqueFd listen, UniqueFd wake_read)
      : options_(std::move(options)),
        token_(std::move(token)),
        listen_(std::move(listen)),
        wake_read_(std::move(wake_read)) {}

  // Serves until `stop` is set (and the wake pipe written).
  void Run();

  std::atomic<bool> stop{false};

 private:
  struct Connection {
    int64_t id = 0;
    UniqueFd fd;
    FrameReader reader{kMaxHelloFrameBytes};
    std::string out;           // Encoded responses not yet fully sent.
    size_t out_sent = 0;       // Bytes of `out` already sent.
    bool authenticated = false;
    bool parked = false;       // Its Get/Wait waits in state_.
    bool close_after_write = false;
    bool closed = false;
    absl::Time hello_deadline;
  };

  std::vector<pollfd> PollSet() const;
  void Accept(absl::Time now);
  void OnEvents(Connection& c, short revents, absl::Time now);
  void Read(Connection& c, absl::Time now);
  void ProcessFrames(Connection& c, absl::Time now);
  void HandleHello(Connection& c, const StoreRequest& request);
  void Queue(Connection& c, const StoreResponse& response);
  void Flush(Connection& c);
  void Close(Connection& c);
  void Deliver(absl::Time now);
  void Sweep(absl::Time now);
  absl::Time NextWakeup() const;

  const TcpStoreServerOptions options_;
  const std::string token_;
  UniqueFd listen_;
  UniqueFd wake_read_;
  StoreServerState state_;
  std::vector<std::unique_ptr<Connection>> connections_;
  absl::flat_hash_map<int64_t, Connection*> by_id_;
  int64_t next_id_ = 1;
};

std::vector<pollfd> TcpStoreServer::Loop::PollSet() const {
  std::vector<pollfd> fds;
  fds.push_back({wake_read_.get(), POLLIN, 0});
  const bool accepting = static_cast<int>(connections_.size()) < options_.max_connections;
  fds.push_back({accepting ? listen_.get() : -1, POLLIN, 0});
  for (const auto& c : connections_) {
    short events = POLLRDHUP;
    if (c->out_sent < c->out.size()) {
      events |= POLLOUT;
    } else if (!c->parked) {
      events |= POLLIN;
    }
    fds.push_back({c->fd.get(), events, 0});
  }
  return fds;
}

void TcpStoreServer::Loop::Run() {
  while (!stop.load()) {
    std::vector<pollfd> fds = PollSet();
    const size_t polled = connections_.size();
    int r = ::poll(fds.data(), fds.size(), PollTimeoutMs(NextWakeup()));
    if (r < 0 && errno != EINTR) break;  // Only EFAULT/EINVAL/ENOMEM: nothing sensible left.
    if (stop.load()) break;
    const absl::Time now = absl::Now();
    if (r > 0) {
      for (size_t i = 0; i < polled; ++i) {
        if (fds[i + 2].revents != 0) OnEvents(*connections_[i], fds[i + 2].revents, now);
      }
      if (fds[1].revents & POLLIN) Accept(now);
    }
    Deliver(now);
    Sweep(now);
  }
}

void TcpStoreServer::Loop::Accept(absl::Time now) {
  while (static_cast<int>(connections_.size()) < options_.max_connections) {
    int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a connection that died in the queue.
    auto c = std::make_unique<Connection>();
    c->id = next_id_++;
    c->fd.Reset(fd);
    c->hello_deadline = now + options_.hello_timeout;
    by_id_[c->id] = c.get();
    connections_.push_back(std::move(c));
  }
}

void TcpStoreServer::Loop::OnEvents(Connection& c, short revents, absl::Time now) {
  if (c.closed) return;
  if (revents & POLLOUT) Flush(c);
  if (c.closed) return;
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    Read(c, now);
  } else if (revents & POLLRDHUP) {
    Close(c);  // Hung up while parked or while we were writing: nobody will read the answer.
  }
}

void TcpStoreServer::Loop::Read(Connection& c, absl::Time now) {
  char buffer[64 * 1024];
  ssize_t n = ::recv(c.fd.get(), buffer, sizeof(buffer), MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    Close(c);
    return;
  }
  if (n > 0) {
    c.reader.Append(absl::string_view(buffer, static_cast<size_t>(n)));
    ProcessFrames(c, now);
  }
}

void TcpStoreServer::Loop::ProcessFrames(Connection& c, absl::Time now) {
  while (!c.closed && !c.parked && !c.close_after_write && c.out_sent == c.out.size()) {
    absl::StatusOr<std::optional<std::string>> frame = c.reader.Next();
    if (!frame.ok()) return Close(c);  // Oversized: drop the client.
    if (!frame->has_value()) return;
    absl::StatusOr<StoreRequest> request = DecodeRequest(**frame, options_.limits);
    if (!request.ok()) return Close(c);  // Malformed: drop the client.
    if (!c.authenticated) {
      HandleHello(c, *request);
      continue;
    }
    if (request->op == StoreOp::kHello) return Close(c);
    std::optional<StoreResponse> response = state_.Handle(c.id, *request, now);
    if (response.has_value()) {
      Queue(c, *response);
    } else {
      c.parked = true;
    }
  }
}

void TcpStoreServer::Loop::HandleHello(Connection& c, const StoreRequest& request) {
  if (request.op != StoreOp::kHello) return Close(c);
  absl::Status status;
  if (request.number != kStoreProtocolVersion) {
    status = absl::FailedPreconditionError(absl::StrCat(
        "store protocol version ", request.number, " is not the server's ", kStoreProtocolVersion));
  } else if (!TokensEqual(request.value, token_)) {
    status = absl::PermissionDeniedError(
        "the store server rejected this client's job token (check DDP_JOB_TOKEN)");
  }
  if (status.ok()) {
    c.authenticated = true;
    c.reader.set_max_frame_bytes(options_.limits.max_frame_bytes());
  } else {
    c.close_after_write = true;
  }
  Queue(c, ResponseFromStatus(status));
}

void TcpStoreServer::Loop::Queue(Connection& c, const StoreResponse& response) {
  c.out += EncodeResponseFrame(response);
  Flush(c);
}

void TcpStoreServer::Loop::Flush(Connection& c) {
  while (c.out_sent < c.out.size()) {
    ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;  // POLLOUT will call us again.
    } else if (n < 0 && errno != EINTR) {
      return Close(c);
    }
  }
  c.out.clear();
  c.out_sent = 0;
  if (c.close_after_write) Close(c);
}

void TcpStoreServer::Loop::Close(Connection& c) {
  if (c.closed) return;
  c.closed = true;
  c.fd.Reset();
  state_.Cancel(c.id);
}

void TcpStoreServer::Loop::Deliver(absl::Time now) {
  for (StoreServerState::Completion& done : state_.TakeCompletions(now)) {
    auto it = by_id_.find(done.connection);
    if (it == by_id_.end() || it->second->closed) continue;
    Connection& c = *it->second;
    c.parked = false;
    Queue(c, done.response);
    ProcessFrames(c, now);  // A pipelining client may have sent more.
  }
}

void TcpStoreServer::Loop::Sweep(absl::Time now) {
  for (auto& c : connections_) {
    if (!c->authenticated && now >= c->hello_deadline) Close(*c);
  }
  auto dead = [this](const std::unique_ptr<Connection>& c) {
    if (c->closed) by_id_.erase(c->id);
    return c->closed;
  };
  connections_.erase(std::remove_if(connections_.begin(), connections_.end(), dead),
                     connections_.end());
}

absl::Time TcpStoreServer::Loop::NextWakeup() const {
  absl::Time next = state_.NextDeadline();
  for (const auto& c : connections_) {
    if (!c->authenticated) next = std::min(next, c->hello_deadline);
  }
  return next;
}

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Create(
    TcpStoreServerOptions options) {
  DDP_ASSIGN_OR_RETURN(UniqueFd listen, ListenTcp(options.host, options.port, /*backlog=*/1024));
  DDP_ASSIGN_OR_RETURN(int port, LocalPort(listen.get()));
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::ResourceExhaustedError("TcpStoreServer: cannot create the wake pipe");
  }
  UniqueFd wake_read(pipe_fds[0]), wake_write(pipe_fds[1]);
  std::string token = ResolveJobToken(options.job_token);
  auto loop = std::make_unique<Loop>(std::move(options), std::move(token), std::move(listen),
                                     std::move(wake_read));
  return std::unique_ptr<TcpStoreServer>(
      new TcpStoreServer(port, std::move(wake_write), std::move(loop)));
}

TcpStoreServer::TcpStoreServer(int port, UniqueFd wake_write, std::unique_ptr<Loop> loop)
    : port_(port), wake_write_(std::move(wake_write)), loop_(std::move(loop)) {
  thread_ = std::thread([this] { loop_->Run(); });
}

TcpStoreServer::~TcpStoreServer() {
  loop_->stop.store(true);
  char byte = 1;
  while (::write(wake_write_.get(), &byte, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
}

}  // namespace ddp
