// --log_samples: a line per optimizer step naming the dataset indices each rank trained on, so a test
// (or a suspicious user) can check that every sample of an epoch was used exactly once, across restarts
// and changes of world size.
#ifndef DDP_TRAIN_SAMPLE_LOG_H_
#define DDP_TRAIN_SAMPLE_LOG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace ddp {

// One logged step of one rank.
struct SampleLogEntry {
  int attempt = 0;     // DDP_RESTART_COUNT of the run that wrote it (0 without ddprun restarts)
  int world_size = 1;
  int rank = 0;
  int epoch = 0;
  int64_t step = 0;    // the optimizer step this line finished (1-based, counted over the whole run)
  std::vector<int64_t> ids;  // dataset indices of all micro-batches of the step, in training order
};

// Appends entries as text lines:
//   attempt=0 world=2 rank=1 epoch=1 step=17 ids=4087,12,...
// Every rank (and every restart) may append to the same file: each line is one write(2) on an O_APPEND
// descriptor, so lines never interleave. Not thread-safe (the training thread owns it).
class SampleLog {
 public:
  // Opens (creates) `path` for appending, through a symbolic link. The error names the path; a path that
  // is not a regular file (a device node, a FIFO, a socket) is refused.
  static absl::StatusOr<std::unique_ptr<SampleLog>> Open(const std::string& path);

  // Appends one line. The error names the path (e.g. a full disk).
  absl::Status Append(const SampleLogEntry& entry);

 private:
  SampleLog(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  std::string path_;
  UniqueFd fd_;
};

// Formats / parses one line (no trailing newline). Parsing errors name what was malformed.
std::string FormatSampleLogEntry(const SampleLogEntry& entry);
absl::StatusOr<SampleLogEntry> ParseSampleLogEntry(const std::string& line);

// Reads a whole log. The error names the file and the line number.
absl::StatusOr<std::vector<SampleLogEntry>> ReadSampleLog(const std::string& path);

// The steps that shaped the final model: for each step, the entries of the latest attempt that logged it
// (a restarted attempt resumes from a checkpoint and redoes the steps after it; the killed attempt's
// entries for those steps were lost work). Sorted by (step, rank).
std::vector<SampleLogEntry> EffectiveSteps(const std::vector<SampleLogEntry>& entries);

}  // namespace ddp

#endif  // DDP_TRAIN_SAMPLE_LOG_H_
