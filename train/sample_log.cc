#include "train/sample_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "io/file.h"

namespace ddp {

absl::StatusOr<std::unique_ptr<SampleLog>> SampleLog::Open(const std::string& path) {
  // Anything but a regular file (through links) is refused before it is opened (Note [Output targets] in
  // io/file.cc); O_NONBLOCK keeps a FIFO put there since from blocking the open, and fstat refuses it.
  absl::StatusOr<std::string> file = ResolveOutputFile(path);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("--log_samples=", path, ": ", file.status().message()));
  }
  UniqueFd fd(::open(file->c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    return absl::UnavailableError(absl::StrCat("--log_samples: cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("--log_samples=", path, ": not a regular file"));
  }
  return std::unique_ptr<SampleLog>(new SampleLog(path, std::move(fd)));
}

absl::Status SampleLog::Append(const SampleLogEntry& entry) {
  const std::string line = FormatSampleLogEntry(entry) + "\n";
  const ssize_t written = ::write(fd_.get(), line.data(), line.size());
  if (written != static_cast<ssize_t>(line.size())) {
    return absl::UnavailableError(absl::StrCat("--log_samples: cannot append to ", path_, ": ",
                                               written < 0 ? std::strerror(errno) : "short write"));
  }
  return absl::OkStatus();
}

std::string FormatSampleLogEntry(const SampleLogEntry& e) {
  return absl::StrCat("attempt=", e.attempt, " world=", e.world_size, " rank=", e.rank, " epoch=", e.epoch,
                      " step=", e.step, " ids=", absl::StrJoin(e.ids, ","));
}

absl::StatusOr<SampleLogEntry> ParseSampleLogEntry(const std::string& line) {
  SampleLogEntry e;
  std::map<std::string, std::string> fields;
  for (absl::string_view field : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
    fields[kv.first] = kv.second;
  }
  auto integer = [&](const char* key, int64_t* out) -> absl::Status {
    auto it = fields.find(key);
    if (it == fields.end() || !absl::SimpleAtoi(it->second, out)) {
      return absl::InvalidArgumentError(absl::StrCat("sample log line without a valid ", key, "=: \"", line, "\""));
    }
    return absl::OkStatus();
  };
  int64_t attempt, world, rank, epoch;
  for (auto [key, out] : {std::pair<const char*, int64_t*>{"attempt", &attempt}, {"world", &world},
                          {"rank", &rank}, {"epoch", &epoch}, {"step", &e.step}}) {
    if (absl::Status s = integer(key, out); !s.ok()) return s;
  }
  e.attempt = static_cast<int>(attempt);
  e.world_size = static_cast<int>(world);
  e.rank = static_cast<int>(rank);
  e.epoch = static_cast<int>(epoch);
  auto ids = fields.find("ids");
  if (ids == fields.end()) return absl::InvalidArgumentError(absl::StrCat("sample log line without ids=: \"", line, "\""));
  for (absl::string_view id : absl::StrSplit(ids->second, ',', absl::SkipEmpty())) {
    int64_t value;
    if (!absl::SimpleAtoi(id, &value)) {
      return absl::InvalidArgumentError(absl::StrCat("sample log: bad id \"", id, "\" in \"", line, "\""));
    }
    e.ids.push_back(value);
  }
  return e;
}

absl::StatusOr<std::vector<SampleLogEntry>> ReadSampleLog(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read sample log ", path));
  std::vector<SampleLogEntry> entries;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    absl::StatusOr<SampleLogEntry> entry = ParseSampleLogEntry(line);
    if (!entry.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": ", entry.status().message()));
    }
    entries.push_back(*std::move(entry));
  }
  return entries;
}

std::vector<SampleLogEntry> EffectiveSteps(const std::vector<SampleLogEntry>& entries) {
  std::map<int64_t, int> latest_attempt;  // step -> newest attempt that logged it
  for (const SampleLogEntry& e : entries) {
    auto [it, inserted] = latest_attempt.emplace(e.step, e.attempt);
    if (!inserted) it->second = std::max(it->second, e.attempt);
  }
  std::vector<SampleLogEntry> effective;
  for (const SampleLogEntry& e : entries) {
    if (latest_attempt[e.step] == e.attempt) effective.push_back(e);
  }
  std::stable_sort(effective.begin(), effective.end(), [](const SampleLogEntry& a, const SampleLogEntry& b) {
    return std::tie(a.step, a.rank) < std::tie(b.step, b.rank);
  });
  return effective;
}

}  // namespace ddp
