#include "io/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/fnv1a.h"

namespace ddp {
namespace {

// The directory part of `path`: "." for a bare name, "/" for a name in the root.
std::string Directory(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Writes all of `bytes` to `fd` (the file `path`), retrying after signals and short writes.
absl::Status WriteAll(int fd, absl::string_view bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    // A write that makes no progress without an error means the device is full.
    if (n <= 0) return FileError("write", path, n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FileError(absl::string_view what, absl::string_view path, int error) {
  return absl::ErrnoToStatus(error, absl::StrCat("cannot ", what, " ", path));  // appends ": <strerror>"
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FileError("open", path, errno);
  std::string out;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return FileError("read", path, error);
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

absl::Status WriteFileDurably(const std::string& path, absl::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("create", path, errno);
  absl::Status status = WriteAll(fd, bytes, path);
  if (status.ok() && ::fsync(fd) != 0) status = FileError("fsync", path, errno);
  if (::close(fd) != 0 && status.ok()) status = FileError("close", path, errno);
  return status;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes) {
  const std::string tmp = path + ".tmp";
  absl::Status status = WriteFileDurably(tmp, bytes);
  if (status.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    status = FileError(absl::StrCat("rename ", tmp, " to"), path, errno);
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  return FsyncDirectory(Directory(path));  // makes the rename itself durable
}

absl::Status FsyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FileError("open directory", dir, errno);
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : FileError("fsync directory", dir, error);
}

FileFingerprint FingerprintOf(absl::string_view bytes) {
  return FileFingerprint{bytes.size(), Fnv1a64(bytes.data(), bytes.size())};
}

absl::StatusOr<std::string> ReadFileVerified(const std::string& path, const FileFingerprint& expected) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  const FileFingerprint actual = FingerprintOf(*bytes);
  if (actual.size != expected.size) {
    return absl::DataLossError(absl::StrCat(path, ": truncated or extended: ", actual.size, " bytes, expected ",
                                            expected.size));
  }
  if (actual.fnv1a64 != expected.fnv1a64) {
    return absl::DataLossError(absl::StrFormat("%s: checksum mismatch (corrupt): fnv1a64 %016x, expected %016x",
                                               path, actual.fnv1a64, expected.fnv1a64));
  }
  return bytes;
}

}  // namespace ddp
