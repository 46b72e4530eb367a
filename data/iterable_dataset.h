// Iterable-style datasets (torch.utils.data.IterableDataset): streams too large to index. Each consumer
// -- one loader worker of one rank -- opens its own stream over a disjoint share of the data; together
// the consumers read every example exactly once.
#ifndef DDP_DATA_ITERABLE_DATASET_H_
#define DDP_DATA_ITERABLE_DATASET_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/dataset.h"

namespace ddp {

// Which share of an iterable dataset a consumer reads: worker `worker` of `num_workers` on rank `rank`
// of `world_size`. Consumers are numbered index() = rank * num_workers + worker of count().
struct StreamShard {
  int rank = 0;         // 0 <= rank < world_size
  int world_size = 1;   // ranks reading the dataset
  int worker = 0;       // 0 <= worker < num_workers
  int num_workers = 1;  // loader workers per rank (every rank the same)

  int index() const { return rank * num_workers + worker; }
  int count() const { return world_size * num_workers; }
};

// A one-pass stream of examples. Not thread-safe: one consumer thread owns it.
class ExampleStream {
 public:
  virtual ~ExampleStream() = default;
  // The next example; std::nullopt at the end of the share; an error (naming the record, e.g. file and
  // line) on bad data or I/O failure, after which the stream must not be read again.
  virtual absl::StatusOr<std::optional<Example>> Next() = 0;
};

// An iterable dataset: hands out one stream per consumer. Implementations are immutable and Open() is
// safe to call from several threads at once.
class IterableDataset {
 public:
  virtual ~IterableDataset() = default;
  // A stream over `shard`'s share. Shares of the count() consumers are disjoint and together cover the
  // dataset exactly once. An error names a bad shard or an unreadable source.
  virtual absl::StatusOr<std::unique_ptr<ExampleStream>> Open(const StreamShard& shard) const = 0;
};

// Turns one text line (without its newline) into an example; `line_number` is 1-based, for messages.
using LineParser = std::function<absl::StatusOr<Example>(absl::string_view line, int64_t line_number)>;

// A text file with one example per line. Consumer k of K parses lines k+1, k+1+K, k+1+2K, ... (1-based
// line numbers): shares are disjoint, cover every line once, and differ in count by at most one (so
// data-parallel ranks take nearly the same number of steps). Each consumer scans the file but parses
// only its own lines. Errors name the file and line number.
class TextLineDataset : public IterableDataset {
 public:
  // `parser` must be thread-safe (consumers call it concurrently). The file is opened by each Open().
  TextLineDataset(std::string path, LineParser parser) : path_(std::move(path)), parser_(std::move(parser)) {}
  // The stream uses this dataset's parser: the dataset must outlive it.
  absl::StatusOr<std::unique_ptr<ExampleStream>> Open(const StreamShard& shard) const override;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  LineParser parser_;
};

// Reads up to `batch_size` examples from `stream` and collates them (Collate); std::nullopt when the
// stream is exhausted; a short batch at the end. REQUIRES: batch_size >= 1.
absl::StatusOr<std::optional<Example>> NextStreamBatch(ExampleStream& stream, int64_t batch_size);

}  // namespace ddp

#endif  // DDP_DATA_ITERABLE_DATASET_H_
