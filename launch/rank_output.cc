#include "launch/rank_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
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

namespace {

bool IsIdentifierStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsIdentifierChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The value of macro `name`, or false when it is not one of torchrun's.
bool MacroValue(absl::string_view name, const LogLinePrefixValues& values, std::string* out) {
  if (name == "role_name") {
    *out = values.role_name;
  } else if (name == "rank") {
    *out = absl::StrCat(values.rank);
  } else if (name == "local_rank") {
    *out = absl::StrCat(values.local_rank);
  } else if (name == "hostname") {
    *out = values.hostname;
  } else {
    return false;
  }
  return true;
}

bool Matches(absl::string_view line, const std::vector<std::string>& needles) {
  for (const std::string& needle : needles) {
    if (absl::StrContains(line, needle)) return true;
  }
  return false;
}

}  // namespace

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

std::string ExpandLogLinePrefix(absl::string_view tmpl, const LogLinePrefixValues& values) {
  std::string out;
  size_t i = 0;
  while (i < tmpl.size()) {
    const size_t dollar = tmpl.find('$', i);
    if (dollar == absl::string_view::npos) break;
    absl::StrAppend(&out, tmpl.substr(i, dollar - i));
    i = dollar + 1;
    if (i < tmpl.size() && tmpl[i] == '$') {  // "$$"
      out.push_back('$');
      ++i;
      continue;
    }
    const bool braced = i < tmpl.size() && tmpl[i] == '{';
    size_t start = braced ? i + 1 : i;
    size_t end = start;
    if (end < tmpl.size() && IsIdentifierStart(tmpl[end])) {
      while (end < tmpl.size() && IsIdentifierChar(tmpl[end])) ++end;
    }
    std::string value;
    const bool closed = !braced || (end < tmpl.size() && tmpl[end] == '}');
    if (end > start && closed && MacroValue(tmpl.substr(start, end - start), values, &value)) {
      absl::StrAppend(&out, value);
      i = braced ? end + 1 : end;
    } else {
      out.push_back('$');  // Kept as written, as safe_substitute does.
    }
  }
  if (i < tmpl.size()) absl::StrAppend(&out, tmpl.substr(i));
  return out;
}

std::vector<std::string> ParseDuplicateFilters(absl::string_view text) {
  std::vector<std::string> items(1);
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      items.back().push_back(text[i]);
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      items.back().push_back(',');
      ++i;
    } else {
      items.emplace_back();
    }
  }
  return items;
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
      tail_lines_(tail_lines),
      prefix_(absl::StrCat("[rank ", rank, "] ")) {}

absl::Status RankOutput::SetConsoleOptions(const WorkerConsoleOptions& options, const LogLinePrefixValues& values,
                                           const std::string& attempt_dir) {
  if (!options.log_line_prefix_template.empty()) prefix_ = ExpandLogLinePrefix(options.log_line_prefix_template, values);
  out_filters_ = options.duplicate_stdout_filters;
  err_filters_ = options.duplicate_stderr_filters;
  for (const bool err : {false, true}) {
    if ((err ? err_filters_ : out_filters_).empty()) continue;
    if (attempt_dir.empty()) {
      return absl::InvalidArgumentError("--duplicate_*_filters need an attempt folder for filtered_*.log");
    }
    const std::string path = absl::StrCat(attempt_dir, err ? "/filtered_stderr.log" : "/filtered_stdout.log");
    UniqueFd& fd = err ? err_filtered_ : out_filtered_;
    fd.Reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!fd.valid()) return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void RankOutput::EmitLine(Stream stream, const std::string& line) {
  const bool is_err = stream == Stream::kStderr;
  const bool on_console = is_err ? routing_.stderr_console : routing_.stdout_console;
  const bool print = on_console && (rank_ == 0 || mode_ == RedirectMode::kAll ||
                                    (mode_ == RedirectMode::kErrors && is_err));
  const int file = is_err ? routing_.stderr_file : routing_.stdout_file;
  if (file >= 0) WriteFully(file, absl::StrCat(line, "\n"));
  if (print) {
    const std::string prefixed = absl::StrCat(prefix_, line, "\n");
    WriteFully(is_err ? stderr_fd_ : stdout_fd_, prefixed);
    const UniqueFd& filtered = is_err ? err_filtered_ : out_filtered_;
    if (filtered.valid() && Matches(line, is_err ? err_filters_ : out_filters_)) WriteFully(filtered.get(), prefixed);
  }
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
