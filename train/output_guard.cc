// The start-up checks of train/train. A probe tries what the real write will do (create a file in
// the directory, open an existing file for writing) and undoes it, so the errno it gets is the one the
// write would have got hours later.
#include "train/output_guard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
#include "checkpoint/checkpoint.h"
#include "io/file.h"
#include "tensor/tensor.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

// `status` with "--<flag>=<value>: " in front of its message (the same code).
absl::Status ForFlag(absl::string_view flag, const std::string& value, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("--", flag, "=", value, ": ", status.message()));
}

// Creates the file "<dir>/<base>.probe-XXXXXX" and removes it. Returns 0, or the errno of the failure.
int ProbeDirectory(const std::string& dir, const std::string& base) {
  std::string name = (fs::path(dir) / (base + ".probe-XXXXXX")).string();
  const int fd = ::mkstemp(name.data());
  if (fd < 0) return errno;
  ::close(fd);
  ::unlink(name.c_str());
  return 0;
}

// The nearest existing ancestor of `path` (`path` itself when it exists), or the errno of a lookup that
// failed for another reason than ENOENT in `*error`.
fs::path NearestExisting(fs::path path, int* error) {
  struct stat st;
  *error = 0;
  while (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      *error = errno;
      return path;
    }
    const fs::path parent = path.parent_path();
    path = parent.empty() || parent == path ? fs::path(".") : parent;
  }
  return path;
}

}  // namespace

absl::Status ProbeOutputFile(absl::string_view flag, const std::string& path, OutputWrite how) {
  // Through symbolic links to the file the write lands in; anything there but a regular file (a device
  // node such as /dev/null, a FIFO, a socket, a directory) is refused (Note [Output targets], io/file.cc).
  absl::StatusOr<std::string> target = ResolveOutputFile(path);
  if (!target.ok()) return ForFlag(flag, path, target.status());
  const fs::path file(*target);
  const std::string dir = file.has_parent_path() ? file.parent_path().string() : ".";
  if (const int error = ProbeDirectory(dir, file.filename().string()); error != 0) {
    return ForFlag(flag, path, FileError("create files in", dir, error));
  }
  struct stat st;
  if (::stat(target->c_str(), &st) != 0) return absl::OkStatus();  // created at the end, as the probe was
  if (how == OutputWrite::kInPlace) {
    const int fd = ::open(target->c_str(), O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return ForFlag(flag, path, FileError("open for writing", *target, errno));
    ::close(fd);
  }
  return absl::OkStatus();
}

absl::Status ProbeOutputDirectory(absl::string_view flag, const std::string& dir) {
  int error = 0;
  const fs::path existing = NearestExisting(fs::path(dir), &error);
  if (error != 0) return ForFlag(flag, dir, FileError("create directory", dir, error));
  std::error_code ec;
  if (!fs::is_directory(existing, ec)) {
    return ForFlag(flag, dir, FileError("create directory", dir, ENOTDIR));
  }
  if (const int probe = ProbeDirectory(existing.string(), ""); probe != 0) {
    return ForFlag(flag, dir, FileError("create files in", existing.string(), probe));
  }
  return absl::OkStatus();
}

absl::Status ProbeRankZeroOutputs(const TrainConfig& config, bool writes_trace) {
  if (!config.save.empty()) DDP_RETURN_IF_ERROR(ProbeOutputFile("save", config.save, OutputWrite::kReplaced));
  if (!config.dump_grads.empty()) {
    DDP_RETURN_IF_ERROR(ProbeOutputFile("dump_grads", config.dump_grads, OutputWrite::kReplaced));
  }
  if (!config.metrics_out.empty()) {
    DDP_RETURN_IF_ERROR(ProbeOutputFile("metrics_out", config.metrics_out, OutputWrite::kInPlace));
  }
  if (writes_trace && !config.trace_out.empty()) {
    DDP_RETURN_IF_ERROR(ProbeOutputFile("trace_out", config.trace_out, OutputWrite::kInPlace));
  }
  if (!config.checkpoint_dir.empty() && config.checkpoint_every > 0) {
    DDP_RETURN_IF_ERROR(ProbeOutputDirectory("checkpoint_dir", config.checkpoint_dir));
  }
  return absl::OkStatus();
}

absl::Status GuardExistingCheckpoints(const TrainConfig& config, int64_t start_step) {
  if (config.checkpoint_dir.empty()) return absl::OkStatus();
  DDP_ASSIGN_OR_RETURN(const std::vector<int64_t> steps, ListCheckpointSteps(config.checkpoint_dir));
  std::vector<std::string> newer;  // oldest first
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it > start_step) newer.push_back(absl::StrCat("step-", *it));
  }
  if (newer.empty()) return absl::OkStatus();
  if (config.overwrite_checkpoints) {
    DDP_ASSIGN_OR_RETURN(const std::vector<std::string> removed,
                         RemoveCheckpointsAfter(config.checkpoint_dir, start_step));
    std::fprintf(stderr, "--overwrite_checkpoints: removed %s from %s\n", absl::StrJoin(removed, ", ").c_str(),
                 config.checkpoint_dir.c_str());
    return absl::OkStatus();
  }
  return absl::AlreadyExistsError(absl::StrCat(
      "--checkpoint_dir=", config.checkpoint_dir, " already holds ", absl::StrJoin(newer, ", "),
      ", newer than step ", start_step, " where this run starts, which its checkpoints",
      config.checkpoint_every > 0 ? "" : " (one is saved when a SIGTERM stops it)",
      " would overwrite or fall behind: ", config.resume ? "" : "continue from them with --resume, ",
      "choose another --checkpoint_dir, or pass --overwrite_checkpoints to replace them"));
}

absl::Status AppendLine(const std::string& path, const std::string& line) {
  // Only ever a regular file (ProbeOutputFile checked it at start; this keeps a FIFO put there since from
  // blocking the run).
  DDP_ASSIGN_OR_RETURN(const std::string file, ResolveOutputFile(path));
  const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("open for appending", path, errno);
  const std::string bytes = line + "\n";
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return FileError("append to", path, error);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return FileError("close", path, errno);
  return absl::OkStatus();
}

}  // namespace ddp
