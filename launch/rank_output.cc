#include "launch/rank_output.h"

#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace ddp {

bool ParseRedirectMode(absl::string_view text, RedirectMode* mode) {
  if (text == "all") {
    *mode = RedirectMode::kAll;
  } else if (text == "errors") {
    *mode = RedirectMode::kErrors;
  } else if (text == "none") {
    *mode = RedirectMode::kNone;
  } else {
    return false;
  }
  return true;
}

std::vector<std::string> LineSplitter::Feed(absl::string_view chunk) {
  std::vector<std::string> lines;
  for (char c : chunk) {
    if (c == '\n') {
      lines.push_back(std::move(partial_));
      partial_.clear();
      continue;
    }
    partial_.push_back(c);
    if (partial_.size() >= max_line_bytes_) {
      lines.push_back(std::move(partial_));
      partial_.clear();
    }
  }
  return lines;
}

std::string LineSplitter::Finish() {
  std::string rest = std::move(partial_);
  partial_.clear();
  return rest;
}

void WriteFully(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

RankOutput::RankOutput(int rank, RedirectMode mode, int stdout_fd, int stderr_fd, int log_fd,
                       size_t tail_lines)
    : rank_(rank),
      mode_(mode),
      stdout_fd_(stdout_fd),
      stderr_fd_(stderr_fd),
      log_fd_(log_fd),
      tail_lines_(tail_lines) {}

void RankOutput::EmitLine(Stream stream, const std::string& line) {
  const bool is_err = stream == Stream::kStderr;
  const bool on_console = is_err ? routing_.stderr_console : routing_.stdout_console;
  const bool print = on_console && (rank_ == 0 || mode_ == RedirectMode::kAll ||
                                    (mode_ == RedirectMode::kErrors && is_err));
  const int file = is_err ? routing_.stderr_file : routing_.stdout_file;
  if (file >= 0) WriteFully(file, absl::StrCat(line, "\n"));
  if (print) WriteFully(is_err ? stderr_fd_ : stdout_fd_, absl::StrCat("[rank ", rank_, "] ", line, "\n"));
  if (log_fd_ >= 0) WriteFully(log_fd_, absl::StrCat(line, "\n"));
  tail_.push_back(line);
  if (tail_.size() > tail_lines_) tail_.pop_front();
}

void RankOutput::Feed(Stream stream, absl::string_view chunk) {
  LineSplitter& splitter = stream == Stream::kStdout ? out_lines_ : err_lines_;
  for (const std::string& line : splitter.Feed(chunk)) EmitLine(stream, line);
}

void RankOutput::Finish() {
  std::string out = out_lines_.Finish();
  if (!out.empty()) EmitLine(Stream::kStdout, out);
  std::string err = err_lines_.Finish();
  if (!err.empty()) EmitLine(Stream::kStderr, err);
}

}  // namespace ddp
