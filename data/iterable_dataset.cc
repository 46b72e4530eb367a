#include "data/iterable_dataset.h"

#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ddp {
namespace {

// Consumer `index` of `count`: parses every count-th line from line `index` (0-based).
class TextLineStream : public ExampleStream {
 public:
  TextLineStream(std::string path, std::ifstream in, const LineParser* parser, int index, int count)
      : path_(std::move(path)), in_(std::move(in)), parser_(parser), index_(index), count_(count) {}

  absl::StatusOr<std::optional<Example>> Next() override {
    std::string line;
    while (std::getline(in_, line)) {
      const int64_t number = next_line_++;
      if (number % count_ != index_) continue;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      absl::StatusOr<Example> example = (*parser_)(line, number + 1);
      if (!example.ok()) {
        return absl::Status(example.status().code(),
                            absl::StrCat(path_, ":", number + 1, ": ", example.status().message()));
      }
      return std::optional<Example>(std::move(example).value());
    }
    if (in_.bad()) return absl::DataLossError(absl::StrCat(path_, ": read error after line ", next_line_));
    return std::optional<Example>();
  }

 private:
  std::string path_;
  std::ifstream in_;
  const LineParser* parser_;
  int index_;
  int count_;
  int64_t next_line_ = 0;  // 0-based number of the next line read
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExampleStream>> TextLineDataset::Open(const StreamShard& shard) const {
  if (shard.world_size < 1 || shard.num_workers < 1 || shard.rank < 0 || shard.rank >= shard.world_size ||
      shard.worker < 0 || shard.worker >= shard.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("TextLineDataset ", path_, ": bad shard rank ", shard.rank, " of ",
                                                   shard.world_size, ", worker ", shard.worker, " of ",
                                                   shard.num_workers));
  }
  std::ifstream in(path_);
  if (!in.is_open()) return absl::NotFoundError(absl::StrCat("TextLineDataset: cannot open ", path_));
  return std::unique_ptr<ExampleStream>(new TextLineStream(path_, std::move(in), &parser_, shard.index(), shard.count()));
}

absl::StatusOr<std::optional<Example>> NextStreamBatch(ExampleStream& stream, int64_t batch_size) {
  DDP_CHECK(batch_size >= 1) << "batch_size " << batch_size;
  std::vector<Example> examples;
  while (static_cast<int64_t>(examples.size()) < batch_size) {
    DDP_ASSIGN_OR_RETURN(std::optional<Example> example, stream.Next());
    if (!example) break;
    examples.push_back(std::move(*example));
  }
  if (examples.empty()) return std::optional<Example>();
  DDP_ASSIGN_OR_RETURN(Example batch, Collate(examples));
  return std::optional<Example>(std::move(batch));
}

}  // namespace ddp
