// TextLineDataset: every line exactly once across ranks x workers, balanced shares, errors by line.
#include "data/iterable_dataset.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "testing/number_lines.h"

namespace ddp {
namespace {

TEST(IterableDatasetTest, EveryLineExactlyOnceAcrossRanksAndWorkers) {
  for (int64_t lines : {0, 1, 7, 100, 1001}) {
    TextLineDataset dataset(WriteNumberLines(absl::StrCat("lines_", lines, ".txt"), lines, /*scale=*/10), ParseNumberLine);
    for (int world : {1, 2, 3}) {
      for (int workers : {1, 2, 4}) {
        // Every consumer on its own thread, as ranks x loader workers would be.
        std::vector<std::vector<int64_t>> read(world * workers);
        std::vector<std::thread> threads;
        for (int rank = 0; rank < world; ++rank) {
          for (int worker = 0; worker < workers; ++worker) {
            threads.emplace_back([&, rank, worker] {
              StreamShard shard{rank, world, worker, workers};
              auto stream = dataset.Open(shard);
              ASSERT_TRUE(stream.ok()) << stream.status();
              while (true) {
                auto batch = NextStreamBatch(**stream, 3);
                ASSERT_TRUE(batch.ok()) << batch.status();
                if (!batch->has_value()) break;
                std::vector<float> input = (*batch)->input.ToVector<float>();
                std::vector<int64_t> target = (*batch)->target.ToVector<int64_t>();
                for (size_t i = 0; i < target.size(); ++i) {
                  EXPECT_EQ(input[i], 10.0f * target[i]);
                  read[shard.index()].push_back(target[i]);
                }
              }
            });
          }
        }
        for (auto& t : threads) t.join();
        std::vector<int> seen(lines + 1, 0);
        size_t smallest = SIZE_MAX, largest = 0;
        for (const auto& share : read) {
          smallest = std::min(smallest, share.size());
          largest = std::max(largest, share.size());
          for (int64_t line : share) ++seen[line];
        }
        for (int64_t line = 1; line <= lines; ++line) {
          EXPECT_EQ(seen[line], 1) << "line " << line << " of " << lines << ", world " << world << " x " << workers;
        }
        EXPECT_LE(largest - smallest, 1u);
      }
    }
  }
}

TEST(IterableDatasetTest, ErrorsNameTheFileAndLine) {
  const std::string path = WriteNumberLines("bad.txt", 20, /*scale=*/10, /*bad_line=*/13);
  TextLineDataset dataset(path, ParseNumberLine);
  auto stream = dataset.Open(StreamShard{0, 2, 0, 2});  // consumer 0 of 4: lines 1, 5, 9, 13, ...
  ASSERT_TRUE(stream.ok());
  absl::Status failure;
  while (failure.ok()) {
    auto example = (*stream)->Next();
    if (!example.ok()) failure = example.status();
    else if (!example->has_value()) break;
  }
  EXPECT_NE(failure.message().find(path + ":13: not a number: \"x\""), std::string::npos) << failure;
  EXPECT_EQ(TextLineDataset("/nonexistent/lines.txt", ParseNumberLine).Open(StreamShard{}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(dataset.Open(StreamShard{2, 2, 0, 1}).ok());
}

}  // namespace
}  // namespace ddp
