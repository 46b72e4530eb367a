// RankOutput: what ddprun does with one worker's stdout and stderr bytes — split into lines, prefix
// "[rank N] ", print according to --redirect, copy to the rank's log file, keep the last lines.
#ifndef DDP_LAUNCH_RANK_OUTPUT_H_
#define DDP_LAUNCH_RANK_OUTPUT_H_

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ddp {

// Which output of ranks other than 0 ddprun prints (rank 0 always prints everything).
enum class RedirectMode {
  kAll,     // stdout and stderr.
  kErrors,  // stderr only.
  kNone,    // nothing.
};

// Parses "all" | "errors" | "none"; returns false for anything else.
bool ParseRedirectMode(absl::string_view text, RedirectMode* mode);

// Splits a byte stream into lines. Lines longer than `max_line_bytes` are cut into pieces of that
// size. Not thread-safe.
class LineSplitter {
 public:
  explicit LineSplitter(size_t max_line_bytes = 64 * 1024) : max_line_bytes_(max_line_bytes) {}
  // Returns the lines (without '\n') completed by `chunk`.
  std::vector<std::string> Feed(absl::string_view chunk);
  // Returns the unterminated rest (empty when none) and resets.
  std::string Finish();

 private:
  const size_t max_line_bytes_;
  std::string partial_;
};

// Where one worker's streams go besides what RedirectMode says (torchrun's --redirects, --tee and
// --local_ranks_filter): a stream off the console is not printed; a stream with a file has its lines
// written there as the worker wrote them (no prefix). The fds are not owned.
struct RankOutputRouting {
  bool stdout_console = true;
  bool stderr_console = true;
  int stdout_file = -1;
  int stderr_file = -1;
};

// Routes one worker's output. Writes to `stdout_fd`/`stderr_fd` (ddprun's own, normally 1 and 2)
// and, when `log_fd` >= 0, every line to the log file. Does not own the fds. Not thread-safe.
class RankOutput {
 public:
  enum class Stream { kStdout, kStderr };

  RankOutput(int rank, RedirectMode mode, int stdout_fd, int stderr_fd, int log_fd,
             size_t tail_lines = 20);

  // Replaces the routing (default: both streams on the console, no files). Call before Feed.
  void SetRouting(const RankOutputRouting& routing) { routing_ = routing; }
  // Handles bytes read from the worker's `stream`.
  void Feed(Stream stream, absl::string_view chunk);
  // Emits unterminated last lines of both streams (call once the worker has exited).
  void Finish();
  // The last `tail_lines` lines of both streams, oldest first.
  std::vector<std::string> Tail() const { return {tail_.begin(), tail_.end()}; }

 private:
  void EmitLine(Stream stream, const std::string& line);

  const int rank_;
  const RedirectMode mode_;
  const int stdout_fd_, stderr_fd_, log_fd_;
  const size_t tail_lines_;
  LineSplitter out_lines_, err_lines_;
  std::deque<std::string> tail_;
  RankOutputRouting routing_;
};

// Writes all of `data` to `fd`, retrying on EINTR and short writes; gives up silently on errors
// (a closed terminal must not stop the launcher).
void WriteFully(int fd, absl::string_view data);

}  // namespace ddp

#endif  // DDP_LAUNCH_RANK_OUTPUT_H_
