#include "comm/init.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/shm/small_dev_shm.h"
#include "store/socket_util.h"
#include "testing/child_process.h"
#include "tensor/factory.h"

namespace ddp {
namespace {

EnvLookup Fake(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Every rank joins through `make_options(rank)` and all-reduces its rank + 1.
void JoinAndAllReduce(int world, const std::function<InitOptions(int)>& make_options) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      auto context = InitProcessGroup(make_options(rank));
      ASSERT_TRUE(context.ok()) << context.status();
      Tensor t = Full({4}, static_cast<float>(rank + 1));
      ASSERT_TRUE((*context)->group->AllReduce(t)->Wait(absl::Seconds(30)).ok());
      EXPECT_EQ(t.ToVector<float>()[0], world * (world + 1) / 2.0f);
      ASSERT_TRUE((*context)->group->Barrier()->Wait(absl::Seconds(30)).ok());  // rank 0 hosts the store
    });
  }
  for (auto& t : threads) t.join();
}

TEST(InitTest, EnvMethodWithTorchrunVariables) {
  const std::string port = std::to_string(FreePort());
  JoinAndAllReduce(3, [&](int rank) {
    InitOptions options;
    options.env = Fake({{"RANK", std::to_string(rank)},
                        {"WORLD_SIZE", "3"},
                        {"MASTER_ADDR", "127.0.0.1"},
                        {"MASTER_PORT", port},
                        {"DDP_TIMEOUT_S", "30"}});
    return options;
  });
}

TEST(InitTest, TcpMethodWithExplicitRanks) {
  const std::string url = "tcp://127.0.0.1:" + std::to_string(FreePort());
  JoinAndAllReduce(2, [&](int rank) {
    InitOptions options;
    options.init_method = url;
    options.rank = rank;
    options.world_size = 2;
    options.env = Fake({});
    options.timeout = absl::Seconds(30);
    return options;
  });
}

TEST(InitTest, FileMethod) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string url =
      std::string("file://") + (tmp ? tmp : "/tmp") + "/init_file_store_" + std::to_string(getpid());
  JoinAndAllReduce(2, [&](int rank) {
    InitOptions options;
    options.init_method = url;
    options.rank = rank;
    options.world_size = 2;
    options.env = Fake({});
    options.timeout = absl::Seconds(30);
    return options;
  });
}

TEST(InitTest, BadMethodsAndBackendsAreNamed) {
  InitOptions options;
  options.env = Fake({});
  options.init_method = "udp://x";
  EXPECT_NE(InitProcessGroup(options).status().message().find("unknown init method \"udp://x\""),
            std::string::npos);
  options.init_method = "tcp://nohost";
  EXPECT_NE(InitProcessGroup(options).status().message().find("expected tcp://host:port"), std::string::npos);
  options.init_method = "env://";
  options.backend = "mpx";
  EXPECT_NE(InitProcessGroup(options).status().message().find("unknown backend \"mpx\""), std::string::npos);
}

TEST(InitTest, MissingPeersTimeOut) {
  InitOptions options;
  options.init_method = "tcp://127.0.0.1:" + std::to_string(FreePort());
  options.rank = 0;
  options.world_size = 3;
  options.env = Fake({});
  options.timeout = absl::Seconds(1);
  auto context = InitProcessGroup(options);
  ASSERT_FALSE(context.ok());
  // The peers that never came are named, not (only) this rank or the store key Gloo waited for.
  EXPECT_NE(context.status().message().find("rank 0 of 3 could not connect to its peers: ranks 1, 2 never joined"),
            std::string::npos)
      << context.status();
}

// Joins as rank 0 of 1 with MASTER_ADDR=`master_addr` and DDP_JOB_TOKEN=`token` ("": unset), hosting
// the store on `port`. Returns what InitProcessGroup printed on stderr, followed by whether the store
// could be reached at 127.0.0.2, another address of this host.
std::string JoinAloneAsRankZero(const std::string& master_addr, int port, const std::string& token = "") {
  std::map<std::string, std::string> env = {{"RANK", "0"},
                                            {"WORLD_SIZE", "1"},
                                            {"MASTER_ADDR", master_addr},
                                            {"MASTER_PORT", std::to_string(port)},
                                            {"DDP_TIMEOUT_S", "5"}};
  if (!token.empty()) env["DDP_JOB_TOKEN"] = token;
  InitOptions options;
  options.env = Fake(env);
  testing::internal::CaptureStderr();
  auto context = InitProcessGroup(options);
  std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(context.ok()) << context.status();
  if (context.ok()) {  // probed while the store still listens
    auto probe = ConnectTcp("127.0.0.2", port, absl::Now() + absl::Seconds(2));
    printed += probe.ok() ? "[reachable at 127.0.0.2]" : "[unreachable at 127.0.0.2]";
  }
  return printed;
}

// MASTER_ADDR=127.0.0.1: rank 0's store listens on loopback 127.0.0.1 only (not on 0.0.0.0 whatever
// MASTER_ADDR says), so another local address (127.0.0.2, or the host's network address) does not reach
// it; loopback needs no warning.
TEST(InitTest, StoreListensOnLoopbackMasterAddr) {
  const std::string printed = JoinAloneAsRankZero("127.0.0.1", FreePort());
  EXPECT_NE(printed.find("[unreachable at 127.0.0.2]"), std::string::npos) << printed;
  EXPECT_EQ(printed.find("warning"), std::string::npos) << printed;
}

// MASTER_ADDR=0.0.0.0 without a job token: rank 0 refuses to host a store any client could reach
// (Note [Job tokens]); with DDP_JOB_TOKEN it listens on every interface.
TEST(InitTest, OpenStoreWithoutTokenIsRefused) {
  const int port = FreePort();
  InitOptions options;
  options.env = Fake({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "0.0.0.0"},
                      {"MASTER_PORT", std::to_string(port)}, {"DDP_TIMEOUT_S", "5"}});
  const absl::Status refused = InitProcessGroup(options).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_NE(refused.message().find("the TCP store on 0.0.0.0:" + std::to_string(port) +
                                   " would accept any client that can reach it: beyond loopback a job token is required"),
            std::string::npos)
      << refused;
  const std::string printed = JoinAloneAsRankZero("0.0.0.0", FreePort(), "secret");
  EXPECT_NE(printed.find("[reachable at 127.0.0.2]"), std::string::npos) << printed;
}

// Another service on MASTER_PORT accepts connections and never answers: a rank fails within
// DDP_TIMEOUT_S (not a fixed 60 s), and the error names that timeout.
TEST(InitTest, SilentServiceOnMasterPortFailsWithinTheTimeout) {
  auto silent = ListenTcp("127.0.0.1", 0, 16);
  ASSERT_TRUE(silent.ok()) << silent.status();
  InitOptions options;
  options.env = Fake({{"RANK", "1"},
                      {"WORLD_SIZE", "2"},
                      {"MASTER_ADDR", "127.0.0.1"},
                      {"MASTER_PORT", std::to_string(*LocalPort(silent->get()))},
                      {"DDP_TIMEOUT_S", "2"}});
  const absl::Time start = absl::Now();
  auto context = InitProcessGroup(options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(6));
  ASSERT_FALSE(context.ok());
  EXPECT_NE(context.status().message().find("within 2s"), std::string::npos) << context.status();
}

TEST(InitTest, LocalAddressTowardLoopback) { EXPECT_EQ(LocalAddressToward("127.0.0.1"), "127.0.0.1"); }

// Two ranks (threads) join with `backend` and all-reduce rank + 1 where /dev/shm holds 1 MiB (a forked
// child in a private mount namespace: a container's small /dev/shm). They meet through a file store: a
// rank that fails leaves no store behind that its peer still needs. OK when `check` accepts every rank's
// outcome (the group's backend or its error) and what the process printed on stderr.
absl::Status JoinWithSmallDevShm(
    const std::string& backend,
    const std::function<absl::Status(const std::vector<absl::StatusOr<std::string>>&, const std::string&)>& check) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string url = absl::StrCat("file://", tmp ? tmp : "/tmp", "/small_dev_shm_store_", getpid());
  std::vector<absl::StatusOr<std::string>> outcomes(2, absl::UnknownError("not run"));
  testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      InitOptions options;
      options.backend = backend;
      options.init_method = url;
      options.rank = rank;
      options.world_size = 2;
      options.env = Fake({});
      options.timeout = absl::Seconds(30);
      auto context = InitProcessGroup(options);
      if (!context.ok()) {
        outcomes[rank] = context.status();
        return;
      }
      ProcessGroup& group = *(*context)->group;
      Tensor t = Full({1 << 18}, static_cast<float>(rank + 1));
      absl::Status reduced = group.AllReduce(t)->Wait(absl::Seconds(30));
      if (reduced.ok() && t.ToVector<float>()[12345] != 3.0f) reduced = absl::DataLossError("wrong sum");
      outcomes[rank] = reduced.ok() ? absl::StatusOr<std::string>(group.backend_name()) : reduced;
    });
  }
  for (std::thread& t : threads) t.join();
  return check(outcomes, testing::internal::GetCapturedStderr());
}

// Too small a /dev/shm for the segments: backend auto trains on Gloo on every rank, and rank 0 says why
// in one line naming /dev/shm's size.
TEST(InitTest, AutoFallsBackToGlooWhenDevShmIsTooSmall) {
  const ChildRun run = RunInChild([] { return MountSmallDevShm(1 << 20); }, [] {
    return JoinWithSmallDevShm("auto", [](const auto& outcomes, const std::string& printed) -> absl::Status {
      for (const auto& outcome : outcomes) {
        if (!outcome.ok() || *outcome != "gloo") {
          return absl::InternalError(absl::StrCat("expected gloo, got ", outcome.ok() ? *outcome : outcome.status().ToString()));
        }
      }
      const std::string line = "ddp: backend auto: gloo, since shared memory cannot be used: ";
      if (std::count(printed.begin(), printed.end(), '\n') != 1 || !absl::StartsWith(printed, line) ||
          !absl::StrContains(printed, "/dev/shm has 1048576 bytes")) {
        return absl::InternalError(absl::StrCat("expected one line \"", line, "...\", printed: ", printed));
      }
      return absl::OkStatus();
    });
  });
  if (run.skipped) GTEST_SKIP() << "no private /dev/shm: " << run.status.message();
  EXPECT_TRUE(run.status.ok()) << run.status;
}

// Backend shm asked for explicitly fails on every rank, naming /dev/shm's size and the bytes needed.
TEST(InitTest, ShmFailsNamingDevShmWhenItIsTooSmall) {
  const ChildRun run = RunInChild([] { return MountSmallDevShm(1 << 20); }, [] {
    return JoinWithSmallDevShm("shm", [](const auto& outcomes, const std::string&) -> absl::Status {
      for (const auto& outcome : outcomes) {
        const std::string message(outcome.status().message());
        if (outcome.ok() || !absl::StrContains(message, "/dev/shm has 1048576 bytes") ||
            !absl::StrContains(message, "cannot reserve 2101248 bytes") || !absl::StrContains(message, "--shm-size")) {
          return absl::InternalError(absl::StrCat("expected an error naming /dev/shm, got ",
                                                  outcome.ok() ? *outcome : outcome.status().ToString()));
        }
      }
      return absl::OkStatus();
    });
  });
  if (run.skipped) GTEST_SKIP() << "no private /dev/shm: " << run.status.message();
  EXPECT_TRUE(run.status.ok()) << run.status;
}

}  // namespace
}  // namespace ddp
