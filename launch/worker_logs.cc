#include "launch/worker_logs.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace ddp {
namespace {

bool ParseStd(absl::string_view text, StdStreams* streams) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0 || value > 3) return false;
  streams->out = (value & 1) != 0;
  streams->err = (value & 2) != 0;
  return true;
}

absl::Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
}

// mkdtemp on `pattern` (ending in XXXXXX).
absl::StatusOr<std::string> MakeUniqueDir(std::string pattern) {
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (::mkdtemp(buffer.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot create a folder like ", pattern, ": ", std::strerror(errno)));
  }
  return std::string(buffer.data());
}

}  // namespace

StdStreams StdStreamsByRank::For(int local_rank) const {
  if (by_local_rank.empty()) return all;
  auto it = by_local_rank.find(local_rank);
  return it == by_local_rank.end() ? StdStreams() : it->second;
}

bool StdStreamsByRank::Any() const {
  if (all.out || all.err) return true;
  for (const auto& [rank, streams] : by_local_rank) {
    if (streams.out || streams.err) return true;
  }
  return false;
}

absl::StatusOr<StdStreamsByRank> ParseStdStreams(absl::string_view flag, absl::string_view text) {
  const auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", text, ": expected 0 (none), 1 (stdout), 2 (stderr), 3 (both), or per local rank "
        "LOCAL_RANK:0..3 separated by commas (e.g. 0:1,1:2)"));
  };
  StdStreamsByRank result;
  if (text.find(':') == absl::string_view::npos) {
    if (!ParseStd(text, &result.all)) return bad();
    return result;
  }
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
    int local_rank = 0;
    StdStreams streams;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &local_rank) || local_rank < 0 ||
        !ParseStd(parts[1], &streams)) {
      return bad();
    }
    result.by_local_rank[local_rank] = streams;
  }
  return result;
}

absl::StatusOr<std::unique_ptr<WorkerLogTree>> WorkerLogTree::Create(const std::string& log_dir,
                                                                     const std::string& run_id) {
  std::string base = log_dir;
  std::string temporary;
  if (base.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    const std::string parent = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    absl::StatusOr<std::string> made = MakeUniqueDir(absl::StrCat(parent, "/ddprun_XXXXXX"));
    if (!made.ok()) return made.status();
    base = temporary = *made;
  } else {
    absl::Status made = MakeDir(base);
    if (!made.ok()) return made;
  }
  // run_id comes from the command line: keep it to one path component.
  std::string safe_id = run_id;
  for (char& c : safe_id) {
    if (c == '/' || c == '\0') c = '_';
  }
  absl::StatusOr<std::string> run_dir = MakeUniqueDir(absl::StrCat(base, "/", safe_id, "_XXXXXX"));
  if (!run_dir.ok()) {
    if (!temporary.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(temporary, ignored);
    }
    return run_dir.status();
  }
  return std::unique_ptr<WorkerLogTree>(new WorkerLogTree(temporary, *run_dir));
}

WorkerLogTree::~WorkerLogTree() {
  if (temporary_base_.empty() || keep_) return;
  std::error_code ignored;
  std::filesystem::remove_all(temporary_base_, ignored);
}

absl::Status WorkerLogTree::StartAttempt(int restart, int nproc) {
  const std::string attempt = absl::StrCat(run_dir_, "/attempt_", restart);
  std::error_code ignored;
  std::filesystem::remove_all(attempt, ignored);
  absl::Status made = MakeDir(attempt);
  for (int local = 0; made.ok() && local < nproc; ++local) made = MakeDir(absl::StrCat(attempt, "/", local));
  return made;
}

std::string WorkerLogTree::AttemptDir(int restart) const { return absl::StrCat(run_dir_, "/attempt_", restart); }

std::string WorkerLogTree::WorkerFile(int restart, int local_rank, absl::string_view name) const {
  return absl::StrCat(run_dir_, "/attempt_", restart, "/", local_rank, "/", name);
}

std::optional<std::string> ReadWorkerErrorFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("message")) return std::nullopt;
  const nlohmann::json& message = json["message"];
  if (message.is_string()) return message.get<std::string>();
  if (!message.is_object() || !message.contains("message") || !message["message"].is_string()) return std::nullopt;
  std::string result = message["message"].get<std::string>();
  if (message.contains("extraInfo") && message["extraInfo"].is_object()) {
    const nlohmann::json& extra = message["extraInfo"];
    if (extra.contains("py_callstack") && extra["py_callstack"].is_string()) {
      result += "\n" + extra["py_callstack"].get<std::string>();
    }
  }
  return result;
}

}  // namespace ddp
