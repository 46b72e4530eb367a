// The store host under a flood, end to end: rank 0 of a job started by hand (train/train, no token, the
// most open setting) hosts the store; 4,500 connections that never speak and sixteen 64 MiB Sets hit it.
// Rank 0's peak memory stays within its store cap (DDP_STORE_MAX_BYTES, 256 MiB here) plus one request,
// the Sets beyond the cap are answered "full", and rank 1, started while the silent connections are still
// open, joins and the job completes. Note [The store on a shared host] in store/tcp_store_server.cc.
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/tcp_store_client.h"
#include "testing/process.h"
#include "testing/wait_until.h"
#include "testing/silent_connections.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kStoreCap = 256 * kMiB;
constexpr int kSilentConnections = 4500;
constexpr int kFloodThreads = 4;
constexpr int kSetsPerThread = 4;

std::unique_ptr<BackgroundProcess> StartRank(int rank, int port, const std::string& output) {
  return BackgroundProcess::Start(
      {Runfile("train/train"), "--model=mlp", "--backend=gloo", "--epochs=1", "--max_steps=3", "--num_workers=0"},
      {absl::StrCat("RANK=", rank), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", absl::StrCat("MASTER_PORT=", port),
       "DDP_TIMEOUT_S=60", absl::StrCat("DDP_STORE_MAX_BYTES=", kStoreCap)},
      output);
}

struct FloodResult {
  int stored = 0;
  int full = 0;
  std::string first_error;
};

// kFloodThreads clients, each setting kSetsPerThread values of 64 MiB under keys of its own.
FloodResult FloodWithLargeSets(int port) {
  FloodResult result;
  absl::Mutex mu;
  const std::string value(64 * kMiB, 'f');
  std::vector<std::thread> threads;
  for (int t = 0; t < kFloodThreads; ++t) {
    threads.emplace_back([&, t] {
      TcpStoreClientOptions options;
      options.port = port;
      options.job_token = "";
      options.connect_timeout = absl::Seconds(20);
      options.io_timeout = absl::Seconds(30);
      absl::StatusOr<std::unique_ptr<TcpStoreClient>> client = TcpStoreClient::Create(options);
      for (int i = 0; i < kSetsPerThread; ++i) {
        const absl::Status set = client.ok() ? (*client)->Set(absl::StrCat("flood/", t, "/", i), value) : client.status();
        absl::MutexLock lock(&mu);
        if (set.ok()) {
          ++result.stored;
        } else {
          if (absl::IsResourceExhausted(set)) ++result.full;
          if (result.first_error.empty()) result.first_error = set.ToString();
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return result;
}

TEST(StoreFloodTest, RankZeroStaysBoundedAndTheJobStillJoins) {
  rlimit files = {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_cur < 10000 && files.rlim_max >= 10000) {
    files.rlim_cur = 10000;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  if (files.rlim_cur < 10000) GTEST_SKIP() << "needs 10000 file descriptors, RLIMIT_NOFILE is " << files.rlim_cur;
  const int port = FreeTcpPort();
  std::unique_ptr<BackgroundProcess> rank0 = StartRank(0, port, TempPath("flood_rank0.out"));
  ASSERT_NE(rank0, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return AcceptsConnections(port); }, absl::Seconds(60)))
      << "rank 0 never hosted the store\n" << rank0->Output();
  const int64_t before = PeakRssBytes(rank0->pid());
  ASSERT_GT(before, 0);

  const absl::Time flood_start = absl::Now();
  const std::vector<int> silent = SilentConnections(port, kSilentConnections);
  EXPECT_EQ(static_cast<int>(silent.size()), kSilentConnections);
  const FloodResult flood = FloodWithLargeSets(port);
  EXPECT_LE(flood.stored, 3) << "a 256 MiB cap holds at most three 64 MiB values";
  EXPECT_EQ(flood.stored + flood.full, kFloodThreads * kSetsPerThread) << flood.first_error;
  EXPECT_THAT(flood.first_error, HasSubstr("the TCP store is full"));
  const int64_t growth = PeakRssBytes(rank0->pid()) - before;
  EXPECT_LT(growth, kStoreCap + 128 * kMiB) << "rank 0's peak memory grew by " << growth / kMiB << " MiB";
  std::printf("rank 0 peak RSS: %lld MiB before the flood, +%lld MiB after %d silent connections and %d Sets of "
              "64 MiB (%d stored) in %s\n",
              static_cast<long long>(before / kMiB), static_cast<long long>(growth / kMiB), kSilentConnections,
              kFloodThreads * kSetsPerThread, flood.stored, absl::FormatDuration(absl::Now() - flood_start).c_str());

  const absl::Time joined = absl::Now();
  std::unique_ptr<BackgroundProcess> rank1 = StartRank(1, port, TempPath("flood_rank1.out"));
  ASSERT_NE(rank1, nullptr);
  const std::optional<int> code1 = rank1->Wait(absl::Seconds(60));
  const std::optional<int> code0 = rank0->Wait(absl::Seconds(30));
  EXPECT_EQ(code1, 0) << rank1->Output();
  EXPECT_EQ(code0, 0) << rank0->Output();
  EXPECT_LT(absl::Now() - joined, absl::Seconds(30)) << "rank 1 waited behind the flood";
  std::printf("rank 1 joined and the job completed in %s\n", absl::FormatDuration(absl::Now() - joined).c_str());
  for (int fd : silent) ::close(fd);
}

}  // namespace
}  // namespace ddp
