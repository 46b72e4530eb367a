// TextLineDataset: every line exactly once across ranks x workers, balanced shares, errors by line.
#include "data/iterable_dataset.h"

#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ddp {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
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

std::string WriteLines(const std::string& name, int64_t lines, int64_t bad_line = -1) {
  const std::string path = TempPath(name);
  std::ofstream out(path);
  for (int64_t i = 1; i <= lines; ++i) out << (i == bad_line ? std::string("x") : std::to_string(i * 10)) << "\n";
  return path;
}

TEST(IterableDatasetTest, EveryLineExactlyOnceAcrossRanksAndWorkers) {
  for (int64_t lines : {0, 1, 7, 100, 1001}) {
    TextLineDataset dataset(WriteLines(absl::StrCat("lines_", lines, ".txt"), lines), ParseLine);
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
  const std::string path = WriteLines("bad.txt", 20, /*bad_line=*/13);
  TextLineDataset dataset(path, ParseLine);
  auto stream = dataset.Open(StreamShard{0, 2, 0, 2});  // consumer 0 of 4: lines 1, 5, 9, 13, ...
  ASSERT_TRUE(stream.ok());
  absl::Status failure;
  while (failure.ok()) {
    auto example = (*stream)->Next();
    if (!example.ok()) failure = example.status();
    else if (!example->has_value()) break;
  }
  EXPECT_NE(failure.message().find(path + ":13: not a number: \"x\""), std::string::npos) << failure;
  EXPECT_EQ(TextLineDataset("/nonexistent/lines.txt", ParseLine).Open(StreamShard{}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(dataset.Open(StreamShard{2, 2, 0, 1}).ok());
}

}  // namespace
}  // namespace ddp
