// TCP store specifics: job tokens, connection retries, bad clients, shutdown, shared clients.
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "store/byte_codec.h"
#include "store/socket_util.h"
#include "store/store_protocol.h"
#include "store/tcp_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<TcpStoreServer> StartServer(std::optional<std::string> token = "",
                                            absl::Duration hello_timeout = absl::Seconds(30)) {
  TcpStoreServerOptions options;
  options.host = "127.0.0.1";
  options.job_token = std::move(token);
  options.hello_timeout = hello_timeout;
  auto server = TcpStoreServer::Create(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

absl::StatusOr<std::unique_ptr<TcpStoreClient>> Connect(int port,
                                                        std::optional<std::string> token = "") {
  TcpStoreClientOptions options;
  options.port = port;
  options.job_token = std::move(token);
  options.connect_timeout = absl::Seconds(5);
  options.io_timeout = absl::Seconds(10);
  return TcpStoreClient::Create(options);
}

// True when the server closes `fd` within `timeout` (recv sees EOF or a reset).
bool ClosedByPeer(int fd, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  char buffer[4096];
  while (absl::Now() < deadline) {
    pollfd p = {fd, POLLIN, 0};
    if (::poll(&p, 1, PollTimeoutMs(deadline)) <= 0) continue;
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return true;  // Responses before the close (e.g. a refusal) are skipped.
  }
  return false;
}

std::string HelloFrame(const std::string& token) {
  StoreRequest hello;
  hello.op = StoreOp::kHello;
  hello.number = kStoreProtocolVersion;
  hello.value = token;
  return EncodeRequestFrame(hello);
}

// Sends `bytes` on a fresh raw connection and reports whether the server dropped it.
bool ServerDropsConnectionAfter(int port, const std::string& bytes) {
  auto fd = ConnectTcp("127.0.0.1", port, absl::Now() + absl::Seconds(5));
  if (!fd.ok()) return false;
  if (!SendAll(fd->get(), bytes, absl::Now() + absl::Seconds(5)).ok()) return true;
  return ClosedByPeer(fd->get(), absl::Seconds(5));
}

TEST(TcpStoreTest, WrongJobTokenIsRejectedAtOnce) {
  auto server = StartServer("right");
  const absl::Time start = absl::Now();
  auto client = Connect(server->port(), "wrong");
  ASSERT_EQ(client.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(client.status().message(), HasSubstr("job token"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));  // Not retried until connect_timeout.
  EXPECT_EQ(Connect(server->port(), "").status().code(), absl::StatusCode::kPermissionDenied);
  auto good = Connect(server->port(), "right");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE((*good)->Set("k", "v").ok());
}

TEST(TcpStoreTest, TokenComesFromTheEnvironmentWhenNotGiven) {
  ASSERT_EQ(::setenv("DDP_JOB_TOKEN", "from-env", 1), 0);
  auto server = StartServer(std::nullopt);
  auto client = Connect(server->port(), std::nullopt);
  EXPECT_TRUE(client.ok()) << client.status();
  EXPECT_FALSE(Connect(server->port(), "other").ok());
  ::unsetenv("DDP_JOB_TOKEN");
}

TEST(TcpStoreTest, ClientRetriesUntilTheServerStarts) {
  int port = 0;
  {
    auto probe = StartServer();
    port = probe->port();
  }  // The port is free again.
  std::unique_ptr<TcpStoreServer> late;
  std::thread starter([&] {
    absl::SleepFor(absl::Milliseconds(300));
    TcpStoreServerOptions options;
    options.host = "127.0.0.1";
    options.port = port;
    options.job_token = "";
    auto server = TcpStoreServer::Create(options);
    ASSERT_TRUE(server.ok()) << server.status();
    late = std::move(*server);
  });
  auto client = Connect(port);
  starter.join();
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(*(*client)->Add("n", 2), 2);
}

TEST(TcpStoreTest, ConnectGivesUpAfterItsTimeout) {
  int port = 0;
  {
    auto probe = StartServer();
    port = probe->port();
  }
  TcpStoreClientOptions options;
  options.port = port;
  options.job_token = "";
  options.connect_timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto client = TcpStoreClient::Create(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(client.status().message(), HasSubstr(absl::StrCat(port)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

// Another service on MASTER_PORT that accepts connections and never answers: connect_timeout bounds the
// hello, as the error ("within 10s") says, not a fixed 60 s (io_timeout).
TEST(TcpStoreTest, PeerThatNeverAnswersFailsWithinTheConnectTimeout) {
  auto silent = ListenTcp("127.0.0.1", 0, 16);  // the kernel accepts; nobody ever reads or writes
  ASSERT_TRUE(silent.ok()) << silent.status();
  const int port = *LocalPort(silent->get());
  TcpStoreOptions options;
  options.port = port;
  options.job_token = "";
  options.connect_timeout = absl::Seconds(1);
  options.io_timeout = absl::Seconds(60);
  const absl::Time start = absl::Now();
  auto store = TcpStore::Create(options);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(store.status().message(), HasSubstr(absl::StrCat("127.0.0.1:", port, " within 1s")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
}

TEST(TcpStoreTest, MalformedMessagesCloseOnlyThatConnection) {
  auto server = StartServer("tok");
  const int port = server->port();
  auto client = Connect(port, "tok");
  ASSERT_TRUE(client.ok());
  const std::string hello = HelloFrame("tok");
  EXPECT_TRUE(ServerDropsConnectionAfter(port, std::string("\x03\x00\x00\x00\x08\x01\x02", 7)));
  EXPECT_TRUE(ServerDropsConnectionAfter(port, hello + std::string("\x01\x00\x00\x00\x63", 5)));
  EXPECT_TRUE(ServerDropsConnectionAfter(port, hello + std::string("\xff\xff\xff\xff", 4)));
  EXPECT_TRUE(ServerDropsConnectionAfter(port, std::string("\x01\x00\x01\x00", 4)));  // Hello > 64 KiB.
  EXPECT_TRUE(ServerDropsConnectionAfter(port, hello + hello));  // Second hello.
  {  // A truncated request followed by hang-up.
    auto fd = ConnectTcp("127.0.0.1", port, absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(SendAll(fd->get(), hello + std::string("\x20\x00\x00\x00\x02", 5),
                        absl::Now() + absl::Seconds(5)).ok());
  }
  EXPECT_TRUE((*client)->Set("still", "alive").ok());
  EXPECT_EQ(*(*client)->Get("still", absl::Seconds(5)), "alive");
}

TEST(TcpStoreTest, RandomGarbageNeverStopsTheServer) {
  auto server = StartServer("tok");
  const int port = server->port();
  std::mt19937 rng(1234);
  const std::string hello = HelloFrame("tok");
  for (int i = 0; i < 100; ++i) {
    std::string bytes = (i % 2 == 0) ? hello : std::string();
    const int n = 1 + rng() % 64;
    for (int j = 0; j < n; ++j) bytes.push_back(static_cast<char>(rng()));
    auto fd = ConnectTcp("127.0.0.1", port, absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(fd.ok());
    (void)SendAll(fd->get(), bytes, absl::Now() + absl::Seconds(5));
  }  // Each raw connection closes here, possibly mid-frame.
  auto client = Connect(port, "tok");
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(*(*client)->Add("n", 1), 1);
}

TEST(TcpStoreTest, SilentConnectionIsDroppedAfterHelloTimeout) {
  auto server = StartServer("", absl::Milliseconds(100));
  auto fd = ConnectTcp("127.0.0.1", server->port(), absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(fd.ok());
  EXPECT_TRUE(ClosedByPeer(fd->get(), absl::Seconds(5)));
}

TEST(TcpStoreTest, OversizedValueIsRefusedByTheClient) {
  auto server = StartServer();
  TcpStoreClientOptions options;
  options.port = server->port();
  options.job_token = "";
  options.limits.max_value_bytes = 16;
  auto client = TcpStoreClient::Create(options);
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->Set("k", std::string(17, 'x')).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*client)->Set("k", std::string(16, 'x')).ok());
}

TEST(TcpStoreTest, LargeValuesTravel) {
  auto server = StartServer();
  auto client = Connect(server->port());
  ASSERT_TRUE(client.ok());
  std::string big(3 << 20, 'a');
  big[12345] = 'b';
  ASSERT_TRUE((*client)->Set("big", big).ok());
  EXPECT_EQ(*(*client)->Get("big", absl::Seconds(10)), big);
}

TEST(TcpStoreTest, StoppingTheServerFailsParkedCallsPromptly) {
  auto server = StartServer();
  auto client = Connect(server->port());
  ASSERT_TRUE(client.ok());
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(100));
    server.reset();
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> value = (*client)->Get("never", absl::Seconds(30));
  stopper.join();
  EXPECT_EQ(value.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(TcpStoreTest, OneClientSharedByThreadsDoesNotSerialiseBlockingCalls) {
  auto server = StartServer();
  auto client = Connect(server->port());
  ASSERT_TRUE(client.ok());
  TcpStoreClient* shared = client->get();
  std::thread waiter([shared] { EXPECT_EQ(*shared->Get("go", absl::Seconds(10)), "now"); });
  absl::SleepFor(absl::Milliseconds(50));  // Let the waiter park first.
  EXPECT_TRUE(shared->Set("go", "now").ok());
  waiter.join();
}

TEST(TcpStoreTest, ManyClientThreadsAgainstOneServer) {
  auto server = StartServer("tok");
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto client = Connect(server->port(), "tok");
      ASSERT_TRUE(client.ok()) << client.status();
      for (int i = 0; i < 20; ++i) {
        ASSERT_TRUE((*client)->Set(absl::StrCat("t", t, "/", i), "x").ok());
        ASSERT_TRUE((*client)->Add("total", 1).ok());
      }
      // Everyone waits for everyone's last key.
      std::vector<std::string> keys;
      for (int u = 0; u < kThreads; ++u) keys.push_back(absl::StrCat("t", u, "/19"));
      ASSERT_TRUE((*client)->Wait(keys, absl::Seconds(10)).ok());
    });
  }
  for (std::thread& t : threads) t.join();
  auto client = Connect(server->port(), "tok");
  EXPECT_EQ(*(*client)->Get("total", absl::Seconds(1)), absl::StrCat(kThreads * 20));
  EXPECT_EQ(*(*client)->NumKeys(), kThreads * 20 + 1);
}

TEST(TcpStoreTest, TcpStoreHostsItsServerOnAPickedPort) {
  TcpStoreOptions options;
  options.is_server = true;
  options.port = 0;
  options.server_bind_host = "127.0.0.1";
  options.job_token = "t";
  auto master = TcpStore::Create(options);
  ASSERT_TRUE(master.ok()) << master.status();
  EXPECT_GT((*master)->port(), 0);
  TcpStoreOptions worker_options;
  worker_options.port = (*master)->port();
  worker_options.job_token = "t";
  auto worker = TcpStore::Create(worker_options);
  ASSERT_TRUE(worker.ok()) << worker.status();
  ASSERT_TRUE((*worker)->Set("hello", "rank1").ok());
  EXPECT_EQ(*(*master)->Get("hello", absl::Seconds(5)), "rank1");
}

}  // namespace
}  // namespace ddp
