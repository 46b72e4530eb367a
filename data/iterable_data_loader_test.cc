// IterableDataLoader: exactly-once across ranks x workers, deterministic order, errors, clean shutdown.
#include "data/iterable_data_loader.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ddp {
namespace {

std::string WriteLines(const std::string& name, int64_t lines, int64_t bad_line = -1) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
  std::ofstream out(path);
  for (int64_t i = 1; i <= lines; ++i) out << (i == bad_line ? std::string("x") : std::to_string(i)) << "\n";
  return path;
}

// Line "v" becomes (input [1] = v, target = line number).
absl::StatusOr<Example> ParseLine(absl::string_view line, int64_t line_number) {
  int64_t value;
  if (!absl::SimpleAtoi(line, &value)) return absl::InvalidArgumentError(absl::StrCat("not a number: \"", line, "\""));
  Example example{Tensor::Empty({1}), Tensor::Empty({}, DType::kInt64)};
  example.input.data<float>()[0] = static_cast<float>(value);
  example.target.data<int64_t>()[0] = line_number;
  return example;
}

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
  TextLineDataset dataset(WriteLines("loader_lines.txt", 103), ParseLine);
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
  TextLineDataset dataset(WriteLines("loader_rr.txt", 8), ParseLine);
  IterableDataLoaderOptions options;
  options.batch_size = 1;
  options.num_workers = 2;
  // Worker w reads lines w+1, w+3, ...; delivery alternates workers: 1, 2, 3, 4, ...
  EXPECT_EQ(ReadAll(dataset, options), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(IterableDataLoaderTest, WorkerErrorNamesTheLine) {
  TextLineDataset dataset(WriteLines("loader_bad.txt", 50, /*bad_line=*/37), ParseLine);
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
  TextLineDataset dataset(WriteLines("loader_long.txt", 20000), ParseLine);
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
  TextLineDataset dataset(WriteLines("loader_opts.txt", 3), ParseLine);
  IterableDataLoaderOptions options;
  options.rank = 2;
  options.world_size = 2;
  auto loader = IterableDataLoader::Create(dataset, options);
  ASSERT_FALSE(loader.ok());
  EXPECT_NE(loader.status().message().find("rank=2 world_size=2"), std::string::npos) << loader.status();
}

}  // namespace
}  // namespace ddp
