// RankOutput: what ddprun does with one worker's stdout and stderr bytes — split into lines, prefix
// "[rank N] " (or torchrun's --log_line_prefix_template), print according to --redirect, copy to the
// rank's log file and, for lines matching torchrun's --duplicate_*_filters, to the attempt's filtered
// log, keep the last lines.
#ifndef DDP_LAUNCH_RANK_OUTPUT_H_
#define DDP_LAUNCH_RANK_OUTPUT_H_

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "base/unique_fd.h"

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

// What torchrun's --log_line_prefix_template macros stand for in one worker's prefix.
struct LogLinePrefixValues {
  std::string role_name;  // ${role_name}: --role
  int rank = 0;           // ${rank}: the global rank
  int local_rank = 0;     // ${local_rank}
  std::string hostname;   // ${hostname}: this node's name (gethostname, as torchrun's socket.gethostname)
};

// This node's name (gethostname; "" when it fails), what torchrun's ${hostname} stands for.
std::string HostName();

// Expands `tmpl` as Python's string.Template(tmpl).safe_substitute(...) does with `values` (what
// torchrun 2.15 does): "$name" and "${name}" for the four names above, "$$" for "$"; any other "$..." (an
// unknown name, a lone "$", an unclosed "${") is kept as written.
std::string ExpandLogLinePrefix(absl::string_view tmpl, const LogLinePrefixValues& values);

// Parses torchrun's comma-separated filter list (its comma_separated_list): items split at ',', where
// ",," stands for a literal ','. "" gives one empty filter, which matches every line (as torchrun's).
std::vector<std::string> ParseDuplicateFilters(absl::string_view text);

// torchrun's console options of the workers' output (the same for every worker of a ddprun).
struct WorkerConsoleOptions {
  // --log_line_prefix_template: the prefix of every console line (ExpandLogLinePrefix); "" for ddprun's
  // "[rank N] ". torchrun prefixes only tee'd streams (the others bypass its agent); ddprun relays every
  // console line, so every one gets it.
  std::string log_line_prefix_template;
  // --duplicate_stdout_filters / --duplicate_stderr_filters: console lines of that stream containing any
  // of these strings are also appended, with their console prefix, to <attempt>/filtered_stdout.log
  // (filtered_stderr.log), one file for all local ranks. Empty: no file.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
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
  // Applies `options` for this worker: its console prefix from `values`, and the filtered logs, which are
  // opened for appending (created) in `attempt_dir` when filters are given ("" for no folder: filters are
  // then refused). Call before Feed. Errors: a filtered log that cannot be opened (names the path).
  absl::Status SetConsoleOptions(const WorkerConsoleOptions& options, const LogLinePrefixValues& values,
                                 const std::string& attempt_dir);
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
  std::string prefix_;  // Console prefix of every line.
  // Duplicated console lines (torchrun's --duplicate_*_filters): the needles and the filtered log.
  std::vector<std::string> out_filters_, err_filters_;
  UniqueFd out_filtered_, err_filtered_;
};

// Writes all of `data` to `fd`, retrying on EINTR and short writes; gives up silently on errors
// (a closed terminal must not stop the launcher).
void WriteFully(int fd, absl::string_view data);

}  // namespace ddp

#endif  // DDP_LAUNCH_RANK_OUTPUT_H_
