// The TCP store server on a host shared with others (Note [The store on a shared host]): no open store
// beyond loopback, a flood of silent connections cannot lock a client out, and the memory cap answers
// with a clear error while the connection stays usable.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/tcp_store_client.h"
#include "store/tcp_store_server.h"
#include "testing/silent_connections.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<TcpStoreServer> StartServer(int64_t max_store_bytes) {
  TcpStoreServerOptions options;
  options.job_token = "";
  options.max_store_bytes = max_store_bytes;
  auto server = TcpStoreServer::Create(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

std::unique_ptr<TcpStoreClient> Connect(int port, absl::Duration connect_timeout = absl::Seconds(10)) {
  TcpStoreClientOptions options;
  options.port = port;
  options.job_token = "";
  options.connect_timeout = connect_timeout;
  options.io_timeout = absl::Seconds(20);
  auto client = TcpStoreClient::Create(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

TEST(TcpStoreSharedHostTest, RefusesToListenBeyondLoopbackWithoutAToken) {
  TcpStoreServerOptions open;
  open.host = "0.0.0.0";
  open.job_token = "";
  const absl::Status refused = TcpStoreServer::Create(open).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("beyond loopback a job token is required"));
  TcpStoreServerOptions with_token = open;
  with_token.job_token = "secret";
  EXPECT_TRUE(TcpStoreServer::Create(with_token).ok());
}

// More silent connections than the server's whole connection table (4096): the oldest waiting ones are
// closed to make room, so a client that speaks gets in at once and works.
TEST(TcpStoreSharedHostTest, AFloodOfSilentConnectionsDoesNotLockAClientOut) {
  rlimit files = {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_cur < 10000 && files.rlim_max >= 10000) {
    files.rlim_cur = 10000;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  if (files.rlim_cur < 10000) GTEST_SKIP() << "needs 10000 file descriptors, RLIMIT_NOFILE is " << files.rlim_cur;
  auto server = StartServer(int64_t{1} << 30);
  ASSERT_NE(server, nullptr);
  const std::vector<int> silent = SilentConnections(server->port(), 4500);
  EXPECT_EQ(silent.size(), 4500u);
  const absl::Time start = absl::Now();
  std::unique_ptr<TcpStoreClient> client = Connect(server->port(), absl::Seconds(10));
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->Set("k", "v").ok());
  EXPECT_EQ(*client->Get("k", absl::Seconds(5)), "v");
  EXPECT_LT(absl::Now() - start, absl::Seconds(4)) << "the client waited behind silent connections";
  for (int fd : silent) ::close(fd);
}

// The server runs out of file descriptors (a child with RLIMIT_NOFILE of 48) while silent connections
// queue up: it closes the oldest of them to accept more, so a client that speaks still gets in promptly
// instead of waiting for the silent ones' hello timeout (5 s) or finding the server spinning.
TEST(TcpStoreSharedHostTest, RunningOutOfDescriptorsDoesNotLockAClientOut) {
  int port_pipe[2], stop_pipe[2];
  ASSERT_EQ(::pipe(port_pipe), 0);
  ASSERT_EQ(::pipe(stop_pipe), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(stop_pipe[1]);
    ::close(port_pipe[0]);
    rlimit files = {48, 48};
    if (::setrlimit(RLIMIT_NOFILE, &files) != 0) ::_exit(2);
    TcpStoreServerOptions options;
    options.job_token = "";
    auto server = TcpStoreServer::Create(options);
    if (!server.ok()) ::_exit(3);
    const int port = (*server)->port();
    if (::write(port_pipe[1], &port, sizeof(port)) != sizeof(port)) ::_exit(4);
    char byte = 0;
    (void)!::read(stop_pipe[0], &byte, 1);  // serve until the test is done
    ::_exit(0);
  }
  ::close(port_pipe[1]);
  ::close(stop_pipe[0]);
  int port = 0;
  if (::read(port_pipe[0], &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port))) {
    int status = 0;
    ::waitpid(child, &status, 0);
    FAIL() << "the server child did not start: status " << status;
  }
  const std::vector<int> silent = SilentConnections(port, 300);
  const absl::Time start = absl::Now();
  std::unique_ptr<TcpStoreClient> client = Connect(port, absl::Seconds(10));
  EXPECT_NE(client, nullptr);
  if (client != nullptr) {
    EXPECT_TRUE(client->Set("k", "v").ok());
    EXPECT_LT(absl::Now() - start, absl::Seconds(3)) << "the client waited for the silent connections to time out";
  }
  client.reset();
  for (int fd : silent) ::close(fd);
  ::close(stop_pipe[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "server child status " << status;
}

// Large values: once the held bytes and the next request would pass the cap, the request is read and
// dropped and answered "full" naming the sizes and the cap; the same connection then still works, and
// deleting a key makes room again.
TEST(TcpStoreSharedHostTest, TheMemoryCapAnswersAFullStoreClearly) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  auto server = StartServer(10 * kMiB);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<TcpStoreClient> client = Connect(server->port());
  ASSERT_NE(client, nullptr);
  const std::string value(4 * kMiB, 'v');
  ASSERT_TRUE(client->Set("a", value).ok());
  ASSERT_TRUE(client->Set("b", value).ok());
  const absl::Status full = client->Set("c", value);
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_THAT(full.message(), HasSubstr("the TCP store is full: a request of 4.0 MiB"));
  EXPECT_THAT(full.message(), HasSubstr("above its cap of 10.0 MiB"));
  EXPECT_TRUE(client->Set("small", "fits").ok()) << "the connection survives the refusal";
  EXPECT_EQ(*client->Get("a", absl::Seconds(5)), value);
  ASSERT_TRUE(*client->DeleteKey("a"));
  EXPECT_TRUE(client->Set("c", value).ok());
}

// Values small enough to be received without a reservation are refused when stored, naming the key.
TEST(TcpStoreSharedHostTest, ASetThatWouldPassTheCapNamesItsKey) {
  auto server = StartServer(100 * 1024);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<TcpStoreClient> client = Connect(server->port());
  ASSERT_NE(client, nullptr);
  const std::string value(40 * 1024, 'v');
  ASSERT_TRUE(client->Set("one", value).ok());
  ASSERT_TRUE(client->Set("two", value).ok());
  const absl::Status full = client->Set("three", value);
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_THAT(full.message(), HasSubstr("Set of key 'three'"));
  EXPECT_EQ(*client->NumKeys(), 2);
}

// A value above the per-value limit is refused by the client before anything is sent, naming the key.
TEST(TcpStoreSharedHostTest, AValueAboveTheLimitIsNamed) {
  auto server = StartServer(int64_t{1} << 30);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<TcpStoreClient> client = Connect(server->port());
  ASSERT_NE(client, nullptr);
  const absl::Status refused = client->Set("huge", std::string((64 << 20) + 1, 'x'));
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("store value of 67108865 bytes for key 'huge' is above the store's limit"));
}

}  // namespace
}  // namespace ddp
