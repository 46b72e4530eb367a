// IterableDataLoader: exactly-once across ranks x workers, deterministic order, errors, clean shutdown.
#include "data/iterable_data_loader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tensor/threads.h"
#include "testing/number_lines.h"

namespace ddp {
namespace {

// Every line number this rank's loader delivers, in delivery order.
std::vector<int64_t> ReadAll(const IterableDataset& dataset, IterableDataLoaderOptions options) {
  auto loader = IterableDataLoader::Create(dataset, options);
  EXPECT_TRUE(loader.ok()) << loader.status();
  std::vector<int64_t> lines;
  while (true) {
    auto batch = (*loader)->Next();
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok() || !batch->has_value()) break;
    EXPECT_LE((*batch)->target.numel(), options.batch_size);
    for (int64_t line : (*batch)->target.ToVector<int64_t>()) lines.push_back(line);
  }
  return lines;
}

TEST(IterableDataLoaderTest, EveryLineExactlyOnceAcrossRanksAndWorkersInAFixedOrder) {
  TextLineDataset dataset(WriteNumberLines("loader_lines.txt", 103), ParseNumberLine);
  for (int world : {1, 2, 3}) {
    for (int workers : {1, 2, 4}) {
      std::multiset<int64_t> seen;
      for (int rank = 0; rank < world; ++rank) {
        IterableDataLoaderOptions options;
        options.batch_size = 4;
        options.num_workers = workers;
        options.rank = rank;
        options.world_size = world;
        const std::vector<int64_t> first = ReadAll(dataset, options);
        EXPECT_EQ(ReadAll(dataset, options), first) << "order must not depend on thread timing";
        seen.insert(first.begin(), first.end());
      }
      ASSERT_EQ(seen.size(), 103u) << "world " << world << " workers " << workers;
      for (int64_t line = 1; line <= 103; ++line) EXPECT_EQ(seen.count(line), 1u) << line;
    }
  }
}

TEST(IterableDataLoaderTest, RoundRobinOverWorkers) {
  TextLineDataset dataset(WriteNumberLines("loader_rr.txt", 8), ParseNumberLine);
  IterableDataLoaderOptions options;
  options.batch_size = 1;
  options.num_workers = 2;
  // Worker w reads lines w+1, w+3, ...; delivery alternates workers: 1, 2, 3, 4, ...
  EXPECT_EQ(ReadAll(dataset, options), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

// Workers parse with one kernel thread, whatever the process default (3 here, from BUILD) and the
// trainer's own count (2).
TEST(IterableDataLoaderTest, WorkersRunKernelsOnOneThread) {
  SetNumThreads(2);
  std::atomic<int> other_than_one{0};
  TextLineDataset dataset(WriteNumberLines("loader_threads.txt", 16),
                          [&](absl::string_view line, int64_t number) {
                            const int threads = GetNumThreads();
                            if (threads != 1) other_than_one.store(threads);
                            return ParseNumberLine(line, number);
                          });
  IterableDataLoaderOptions options;
  options.batch_size = 4;
  options.num_workers = 2;
  EXPECT_EQ(ReadAll(dataset, options).size(), 16u);
  EXPECT_EQ(other_than_one.load(), 0) << "a worker parsed with this many kernel threads";
  EXPECT_EQ(GetNumThreads(), 2) << "the trainer's count changed";
  int fresh_thread = 0;
  std::thread([&] { fresh_thread = GetNumThreads(); }).join();
  EXPECT_EQ(fresh_thread, 3) << "control: a thread of its own reads the process default";
}

TEST(IterableDataLoaderTest, WorkerErrorNamesTheLine) {
  TextLineDataset dataset(WriteNumberLines("loader_bad.txt", 50, /*scale=*/1, /*bad_line=*/37), ParseNumberLine);
  IterableDataLoaderOptions options;
  options.batch_size = 5;
  options.num_workers = 3;
  auto loader = IterableDataLoader::Create(dataset, options);
  ASSERT_TRUE(loader.ok());
  absl::Status error;
  for (int i = 0; i < 100 && error.ok(); ++i) {
    auto batch = (*loader)->Next();
    if (!batch.ok()) error = batch.status();
    else if (!batch->has_value()) break;
  }
  ASSERT_FALSE(error.ok());
  EXPECT_NE(error.message().find(":37"), std::string::npos) << error;
  EXPECT_NE(error.message().find("worker 0"), std::string::npos) << error;  // line 37 is worker 0's of 3
}

TEST(IterableDataLoaderTest, DestructionMidStreamIsPrompt) {
  TextLineDataset dataset(WriteNumberLines("loader_long.txt", 20000), ParseNumberLine);
  IterableDataLoaderOptions options;
  options.batch_size = 2;
  options.num_workers = 3;
  const absl::Time start = absl::Now();
  {
    auto loader = IterableDataLoader::Create(dataset, options);
    ASSERT_TRUE(loader.ok());
    ASSERT_TRUE((*loader)->Next().ok());
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(IterableDataLoaderTest, BadOptionsAreNamed) {
  TextLineDataset dataset(WriteNumberLines("loader_opts.txt", 3), ParseNumberLine);
  IterableDataLoaderOptions options;
  options.rank = 2;
  options.world_size = 2;
  auto loader = IterableDataLoader::Create(dataset, options);
  ASSERT_FALSE(loader.ok());
  EXPECT_NE(loader.status().message().find("rank=2 world_size=2"), std::string::npos) << loader.status();
}

}  // namespace
}  // namespace ddp
