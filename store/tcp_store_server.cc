#include "store/tcp_store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <deque>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/describe_bytes.h"
#include "store/job_token.h"
#include "store/socket_util.h"
#include "store/store_exposure.h"
#include "store/store_server_state.h"

// Note [The store on a shared host]: other users of the machine, or a stray program, may connect to the
// store's port. What keeps the job's own ranks served and the host process's memory bounded:
//  * Beyond loopback the server requires a job token (Note [Job tokens] in store/job_token.cc) and binds
//    the address it was given, never a wider one.
//  * Before its hello a connection may send one frame of at most kMaxHelloFrameBytes and has
//    hello_timeout to do so. At most max_pending_connections wait for their hello: one more closes the
//    oldest, so a flood of connections that never speak cannot fill the table and lock the job out (a
//    rank's hello arrives with its connection and is read at once). Running out of descriptors closes the
//    oldest waiting connection too, or pauses accepting briefly, rather than spinning on the listener.
//  * Every byte held for clients counts against max_store_bytes: keys, values (a value being sent is
//    shared with the table, not copied, and one that was replaced stays counted until it is sent),
//    waiting requests' keys, and a large request being received (reserved when its length arrives).
//    What would pass the cap is answered kResourceExhausted, naming the key and the sizes; a rejected
//    request's bytes are read and dropped, so the client gets the answer rather than a reset connection.
//    A request above the protocol's limits closes its connection (TcpStoreClient refuses to send one,
//    naming the limit). Small requests (up to 64 KiB) are not reserved, so that a full store still
//    answers Gets and Deletes; each connection buffers at most one read of 64 KiB beyond its current
//    request. The server's memory is thus bounded by max_store_bytes plus 64 KiB per connection
//    (max_connections) plus one large request being decoded.

namespace ddp {
namespace {

// Frames up to this size are read without a reservation (the per-connection read buffer's size).
constexpr size_t kUnreservedFrameBytes = size_t{64} << 10;
// Connections accepted per loop iteration, so that the hellos of those accepted are read in between.
constexpr int kAcceptBurst = 64;
// How long accepting pauses when the process has no descriptor left and no waiting connection to close.
constexpr absl::Duration kOutOfDescriptorsPause = absl::Milliseconds(100);

absl::StatusOr<int64_t> ResolveMaxStoreBytes(const std::optional<int64_t>& option) {
  if (option.has_value()) {
    if (*option <= 0) return absl::InvalidArgumentError(absl::StrCat("max_store_bytes must be > 0, got ", *option));
    return *option;
  }
  const char* text = std::getenv(kStoreMaxBytesEnv);
  if (text == nullptr || *text == '\0') return kDefaultMaxStoreBytes;
  int64_t bytes = 0;
  if (!absl::SimpleAtoi(text, &bytes) || bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kStoreMaxBytesEnv, "=\"", text, "\": expected a positive number of bytes"));
  }
  return bytes;
}

}  // namespace

// The event loop: one thread, poll() over the wake pipe, the listening socket and every client.
// Each client has at most one request in flight; while it is parked (Get/Wait) or its response is
// still being written, its socket is not read (back-pressure), only watched for hang-up.
class TcpStoreServer::Loop {
 public:
  Loop(TcpStoreServerOptions options, std::string token, int64_t max_store_bytes, UniqueFd listen,
       UniqueFd wake_read)
      : options_(std::move(options)),
        token_(std::move(token)),
        listen_(std::move(listen)),
        wake_read_(std::move(wake_read)),
        state_(max_store_bytes) {}

  // Serves until `stop` is set (and the wake pipe written).
  void Run();

  std::atomic<bool> stop{false};

 private:
  // Bytes waiting to be sent: an encoded piece of a response, or a stored value shared with the table.
  struct OutChunk {
    std::string bytes;
    KvTable::Value shared;
    absl::string_view view() const { return shared != nullptr ? absl::string_view(*shared) : bytes; }
  };

  struct Connection {
    int64_t id = 0;
    UniqueFd fd;
    FrameReader reader{kMaxHelloFrameBytes};
    std::deque<OutChunk> out;  // Responses not yet fully sent.
    size_t out_sent = 0;       // Bytes of out.front() already sent.
    bool authenticated = false;
    bool parked = false;       // Its Get/Wait waits in state_.
    bool close_after_write = false;
    bool closed = false;
    absl::Time hello_deadline;
    int64_t reserved = 0;      // Bytes reserved for the large frame being received.
  };

  std::vector<pollfd> PollSet(absl::Time now) const;
  bool Accepting(absl::Time now) const;
  void Accept(absl::Time now);
  bool ClosePendingToMakeRoom();
  void OnEvents(Connection& c, short revents, absl::Time now);
  void Read(Connection& c, absl::Time now);
  void ProcessFrames(Connection& c, absl::Time now);
  bool AdmitNextFrame(Connection& c);
  void Reject(Connection& c, const absl::Status& status);
  void Release(Connection& c);
  void HandleHello(Connection& c, const StoreRequest& request);
  void Queue(Connection& c, StoreServerState::Reply reply);
  void Flush(Connection& c);
  void Close(Connection& c);
  void Deliver(absl::Time now);
  void Sweep(absl::Time now);
  absl::Time NextWakeup() const;
  int64_t HeldBytes() const { return state_.held_bytes() + reserved_bytes_; }
  size_t max_frame_bytes() const { return options_.limits.max_frame_bytes(); }

  const TcpStoreServerOptions options_;
  const std::string token_;
  UniqueFd listen_;
  UniqueFd wake_read_;
  StoreServerState state_;
  std::vector<std::unique_ptr<Connection>> connections_;
  absl::flat_hash_map<int64_t, Connection*> by_id_;
  std::deque<int64_t> pending_;   // Ids of connections in accept order; stale entries are skipped.
  int open_count_ = 0;            // Connections not closed.
  int pending_count_ = 0;         // Of those, the ones without a completed hello.
  int64_t reserved_bytes_ = 0;    // Sum of Connection::reserved.
  bool closed_since_sweep_ = false;
  absl::Time accept_paused_until_ = absl::InfinitePast();
  int64_t next_id_ = 1;
};

bool TcpStoreServer::Loop::Accepting(absl::Time now) const {
  if (now < accept_paused_until_) return false;
  return open_count_ < options_.max_connections || pending_count_ > 0;
}

std::vector<pollfd> TcpStoreServer::Loop::PollSet(absl::Time now) const {
  std::vector<pollfd> fds;
  fds.push_back({wake_read_.get(), POLLIN, 0});
  fds.push_back({Accepting(now) ? listen_.get() : -1, POLLIN, 0});
  for (const auto& c : connections_) {
    short events = POLLRDHUP;
    if (!c->out.empty()) {
      events |= POLLOUT;
    } else if (!c->parked) {
      events |= POLLIN;
    }
    fds.push_back({c->closed ? -1 : c->fd.get(), events, 0});
  }
  return fds;
}

void TcpStoreServer::Loop::Run() {
  while (!stop.load()) {
    std::vector<pollfd> fds = PollSet(absl::Now());
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

// Closes the connection that has waited longest for its hello; false when none waits.
bool TcpStoreServer::Loop::ClosePendingToMakeRoom() {
  while (!pending_.empty()) {
    auto it = by_id_.find(pending_.front());
    pending_.pop_front();
    if (it == by_id_.end() || it->second->closed || it->second->authenticated) continue;
    Close(*it->second);
    return true;
  }
  return false;
}

void TcpStoreServer::Loop::Accept(absl::Time now) {
  for (int i = 0; i < kAcceptBurst && Accepting(now); ++i) {
    int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        if (ClosePendingToMakeRoom()) continue;
        accept_paused_until_ = now + kOutOfDescriptorsPause;
      }
      return;  // EAGAIN, a connection that died in the queue, or no descriptor to be had.
    }
    auto c = std::make_unique<Connection>();
    c->id = next_id_++;
    c->fd.Reset(fd);
    c->hello_deadline = now + options_.hello_timeout;
    Connection& added = *c;
    by_id_[c->id] = c.get();
    pending_.push_back(c->id);
    connections_.push_back(std::move(c));
    ++open_count_;
    ++pending_count_;
    if (pending_count_ > options_.max_pending_connections || open_count_ > options_.max_connections) {
      ClosePendingToMakeRoom();
    }
    if (!added.closed) Read(added, now);  // A client's hello usually arrives with its connection.
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
  // A client in the middle of a large frame gets up to kReadsPerEvent reads at once, so a 64 MiB value
  // costs a few hundred loop iterations rather than a thousand; a stranger gets one.
  constexpr int kReadsPerEvent = 16;
  char buffer[kUnreservedFrameBytes];
  const int reads = c.authenticated && (c.reserved > 0 || c.reader.skipping()) ? kReadsPerEvent : 1;
  for (int i = 0; i < reads && !c.closed; ++i) {
    const ssize_t n = ::recv(c.fd.get(), buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return Close(c);
    if (n < 0) return;
    c.reader.Append(absl::string_view(buffer, static_cast<size_t>(n)));
    ProcessFrames(c, now);
    if (c.parked || !c.out.empty() || (c.reserved == 0 && !c.reader.skipping())) return;
  }
}

void TcpStoreServer::Loop::Reject(Connection& c, const absl::Status& status) {
  c.reader.Skip();
  Queue(c, {ResponseFromStatus(status), nullptr});
}

// Decides whether the next frame may be received (its length is known once 4 bytes are here): before
// the hello only a small frame; after, one within the limits (else the connection is closed) and, when
// large, within the memory cap, for which room is reserved (else the frame is skipped and answered with
// kResourceExhausted). Returns false when the connection was closed.
bool TcpStoreServer::Loop::AdmitNextFrame(Connection& c) {
  const std::optional<size_t> length = c.reader.NextLength();
  if (!length.has_value() || c.reserved > 0) return true;
  if (!c.authenticated) {
    if (*length > kMaxHelloFrameBytes) Close(c);  // a stranger gets no answer
    return !c.closed;
  }
  if (*length > max_frame_bytes()) {
    Close(c);  // no client of ours sends one (TcpStoreClient checks sizes first)
  } else if (*length > kUnreservedFrameBytes) {
    const int64_t after = HeldBytes() + static_cast<int64_t>(*length);
    if (after > state_.max_held_bytes()) {
      Reject(c, absl::ResourceExhaustedError(absl::StrCat(
                    "the TCP store is full: a request of ", DescribeBytes(*length), " would bring what its server holds to ",
                    DescribeBytes(after), ", above its cap of ", DescribeBytes(state_.max_held_bytes()),
                    " (keys, values and waiting requests; DDP_STORE_MAX_BYTES sets it where the server starts)")));
    } else {
      c.reserved = static_cast<int64_t>(*length);
      reserved_bytes_ += c.reserved;
      c.reader.Reserve(4 + *length);
    }
  }
  return !c.closed;
}

void TcpStoreServer::Loop::Release(Connection& c) {
  reserved_bytes_ -= c.reserved;
  c.reserved = 0;
}

void TcpStoreServer::Loop::ProcessFrames(Connection& c, absl::Time now) {
  while (!c.closed && !c.parked && !c.close_after_write && c.out.empty()) {
    if (!AdmitNextFrame(c)) return;
    if (!c.out.empty()) continue;  // rejected; the loop ends unless the answer went out at once
    absl::StatusOr<std::optional<std::string>> frame = c.reader.Next();
    if (!frame.ok()) return Close(c);  // Oversized before the hello: drop the stranger.
    if (!frame->has_value()) return;
    absl::StatusOr<StoreRequest> request = DecodeRequest(**frame, options_.limits);
    frame->reset();
    if (!request.ok()) return Close(c);  // Malformed: drop the client.
    if (!c.authenticated) {
      HandleHello(c, *request);
      continue;
    }
    if (request->op == StoreOp::kHello) return Close(c);
    std::optional<StoreServerState::Reply> reply = state_.Handle(c.id, *std::move(request), now);
    Release(c);
    if (reply.has_value()) {
      Queue(c, *std::move(reply));
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
        "the store rejected this client's job token: the store belongs to another job, or the ranks were given "
        "different DDP_JOB_TOKEN / DDP_JOB_TOKEN_FILE");
  }
  if (status.ok()) {
    c.authenticated = true;
    --pending_count_;
    c.reader.set_max_frame_bytes(max_frame_bytes());
  } else {
    c.close_after_write = true;
  }
  Queue(c, {ResponseFromStatus(status), nullptr});
}

void TcpStoreServer::Loop::Queue(Connection& c, StoreServerState::Reply reply) {
  if (reply.value == nullptr) {
    c.out.push_back({EncodeResponseFrame(reply.response), nullptr});
  } else {
    ResponseFrameParts parts = EncodeResponseFrameAround(reply.response, reply.value->size());
    c.out.push_back({std::move(parts.head), nullptr});
    c.out.push_back({std::string(), std::move(reply.value)});
    c.out.push_back({std::move(parts.tail), nullptr});
  }
  Flush(c);
}

void TcpStoreServer::Loop::Flush(Connection& c) {
  while (!c.out.empty()) {
    iovec parts[8];
    int count = 0;
    for (auto it = c.out.begin(); it != c.out.end() && count < 8; ++it, ++count) {
      absl::string_view bytes = it->view();
      if (count == 0) bytes.remove_prefix(c.out_sent);
      parts[count] = {const_cast<char*>(bytes.data()), bytes.size()};
    }
    msghdr message = {};
    message.msg_iov = parts;
    message.msg_iovlen = count;
    const ssize_t n = ::sendmsg(c.fd.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return Close(c);
    size_t sent = n < 0 ? 0 : static_cast<size_t>(n);
    const size_t chunks_before = c.out.size();
    while (!c.out.empty()) {  // drop what went out, empty chunks included
      const size_t left = c.out.front().view().size() - c.out_sent;
      if (sent < left) {
        c.out_sent += sent;
        break;
      }
      sent -= left;
      c.out.pop_front();
      c.out_sent = 0;
    }
    if (n <= 0 && c.out.size() == chunks_before) return;  // POLLOUT will call us again.
  }
  if (c.close_after_write) Close(c);
}

void TcpStoreServer::Loop::Close(Connection& c) {
  if (c.closed) return;
  c.closed = true;
  closed_since_sweep_ = true;
  c.fd.Reset();
  c.out.clear();  // releases shared values
  Release(c);
  state_.Cancel(c.id);
  --open_count_;
  if (!c.authenticated) --pending_count_;
}

void TcpStoreServer::Loop::Deliver(absl::Time now) {
  for (StoreServerState::Completion& done : state_.TakeCompletions(now)) {
    auto it = by_id_.find(done.connection);
    if (it == by_id_.end() || it->second->closed) continue;
    Connection& c = *it->second;
    c.parked = false;
    Queue(c, std::move(done.reply));
    ProcessFrames(c, now);  // A pipelining client may have sent more.
  }
}

void TcpStoreServer::Loop::Sweep(absl::Time now) {
  // pending_ is in accept order, hence in hello-deadline order.
  while (!pending_.empty()) {
    auto it = by_id_.find(pending_.front());
    if (it != by_id_.end() && !it->second->closed && !it->second->authenticated) {
      if (now < it->second->hello_deadline) break;
      Close(*it->second);
    }
    pending_.pop_front();
  }
  if (!closed_since_sweep_) return;
  closed_since_sweep_ = false;
  auto dead = [this](const std::unique_ptr<Connection>& c) {
    if (c->closed) by_id_.erase(c->id);
    return c->closed;
  };
  connections_.erase(std::remove_if(connections_.begin(), connections_.end(), dead),
                     connections_.end());
}

absl::Time TcpStoreServer::Loop::NextWakeup() const {
  absl::Time next = state_.NextDeadline();
  for (int64_t id : pending_) {  // the first live one has the earliest deadline
    auto it = by_id_.find(id);
    if (it == by_id_.end() || it->second->closed || it->second->authenticated) continue;
    next = std::min(next, it->second->hello_deadline);
    break;
  }
  if (accept_paused_until_ != absl::InfinitePast()) next = std::min(next, accept_paused_until_);
  return next;
}

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Create(
    TcpStoreServerOptions options) {
  DDP_ASSIGN_OR_RETURN(std::string token, ResolveJobToken(options.job_token));
  DDP_ASSIGN_OR_RETURN(const int64_t max_store_bytes, ResolveMaxStoreBytes(options.max_store_bytes));
  DDP_RETURN_IF_ERROR(CheckStoreExposure(options.host, options.port, token));
  DDP_ASSIGN_OR_RETURN(UniqueFd listen, ListenTcp(options.host, options.port, /*backlog=*/1024));
  DDP_ASSIGN_OR_RETURN(int port, LocalPort(listen.get()));
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::ResourceExhaustedError("TcpStoreServer: cannot create the wake pipe");
  }
  UniqueFd wake_read(pipe_fds[0]), wake_write(pipe_fds[1]);
  auto loop = std::make_unique<Loop>(std::move(options), std::move(token), max_store_bytes, std::move(listen),
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
