#include "io/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
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

// Links followed by ResolveOutputFile before it gives up with ELOOP (Linux's own limit).
constexpr int kMaxLinkDepth = 40;

// What a file of mode `mode` is, for errors: "a directory", "a character device", ...
std::string FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a regular file";
}

// OK for a regular file's mode; else the FailedPrecondition CheckReadableFile documents.
absl::Status NotRegularFileError(const std::string& path, mode_t mode) {
  if (S_ISREG(mode)) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("cannot read ", path, ": it is ", FileKind(mode), ", not a regular file"));
}

// WriteFileDurably into a file created new at `path`: an existing file (or link, FIFO, ...) of that name
// is removed first, and O_EXCL | O_NOFOLLOW make sure the bytes land in the new file and nowhere else.
absl::Status WriteNewFileDurably(const std::string& path, absl::string_view bytes) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && ::unlink(path.c_str()) != 0) {
    return FileError("remove the stale", path, errno);
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("create", path, errno);
  absl::Status status = WriteAll(fd, bytes, path);
  if (status.ok() && ::fsync(fd) != 0) status = FileError("fsync", path, errno);
  if (::close(fd) != 0 && status.ok()) status = FileError("close", path, errno);
  return status;
}

}  // namespace

absl::Status FileError(absl::string_view what, absl::string_view path, int error) {
  return absl::ErrnoToStatus(error, absl::StrCat("cannot ", what, " ", path));  // appends ": <strerror>"
}

absl::Status CheckReadableFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return FileError("open", path, errno);
  return NotRegularFileError(path, st.st_mode);
}

namespace {

// An open descriptor of the regular file at `path` and its size (CheckReadableFile's errors, checked on
// the opened file). The caller closes it.
struct OpenedFile {
  int fd;
  size_t size;
};
absl::StatusOr<OpenedFile> OpenRegularFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO that no program writes returns at once, and fstat then refuses it. Reads
  // of a regular file ignore the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return FileError("open", path, errno);
  struct stat st;
  absl::Status kind =
      ::fstat(fd, &st) == 0 ? NotRegularFileError(path, st.st_mode) : FileError("stat", path, errno);
  if (!kind.ok()) {
    ::close(fd);
    return kind;
  }
  return OpenedFile{fd, static_cast<size_t>(std::max<off_t>(st.st_size, 0))};
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  absl::StatusOr<OpenedFile> file = OpenRegularFile(path);
  if (!file.ok()) return file.status();
  const int fd = file->fd;
  // Read straight into the string, sized by fstat (one copy, no regrowth); a file that grows meanwhile is
  // read to its end all the same.
  std::string out(file->size, '\0');
  size_t filled = 0;
  for (;;) {
    if (filled == out.size()) out.resize(std::max(out.size() + out.size() / 2, filled + (size_t{1} << 16)));
    const ssize_t n = ::read(fd, &out[filled], out.size() - filled);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return FileError("read", path, error);
    }
    if (n == 0) break;
    filled += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(filled);
  return out;
}

MappedFile::~MappedFile() {
  if (address_ != nullptr) ::munmap(address_, size_);
}

absl::StatusOr<std::shared_ptr<const MappedFile>> MapFile(const std::string& path) {
  absl::StatusOr<OpenedFile> file = OpenRegularFile(path);
  if (!file.ok()) return file.status();
  const int fd = file->fd;
  const size_t size = file->size;
  void* address = nullptr;
  if (size > 0) {
    address = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) {
      const int error = errno;
      ::close(fd);
      return FileError("map", path, error);
    }
  }
  ::close(fd);
  return std::make_shared<const MappedFile>(address, size);
}

absl::Status WriteFileDurably(const std::string& path, absl::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("create", path, errno);
  absl::Status status = WriteAll(fd, bytes, path);
  if (status.ok() && ::fsync(fd) != 0) status = FileError("fsync", path, errno);
  if (::close(fd) != 0 && status.ok()) status = FileError("close", path, errno);
  return status;
}

// Note [Output targets]: an output is written beside its file and renamed over it, so a crash never
// leaves half a file. Renaming over a name replaces whatever the name is: a symbolic link would become
// a regular file (the file it pointed to left stale), a device node such as /dev/null would be replaced
// by a regular file (for every program on the machine, when run as root), and so would a FIFO or a
// socket that another program reads. So the name is first resolved through its links to the file the
// user means (what torch.save and `>` write to), and anything there but a regular file is refused by
// name. The temporary is created new (O_EXCL, never through a link), so a stale "<file>.tmp" that is a
// link cannot redirect the write either.
absl::StatusOr<std::string> ResolveOutputFile(const std::string& path) {
  std::string file = path;
  for (int depth = 0;; ++depth) {
    struct stat st;
    if (::lstat(file.c_str(), &st) != 0) {
      // Missing: created by the write (a missing or non-directory parent is the write's error to name).
      if (errno == ENOENT || errno == ENOTDIR) return file;
      return FileError("look up", file, errno);
    }
    if (S_ISREG(st.st_mode)) return file;
    if (!S_ISLNK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write ", file, file == path ? "" : absl::StrCat(" (the target of ", path, ")"),
                       ": it is ", FileKind(st.st_mode), ", not a regular file"));
    }
    if (depth == kMaxLinkDepth) return FileError("resolve", path, ELOOP);
    std::string target(PATH_MAX, '\0');
    const ssize_t n = ::readlink(file.c_str(), target.data(), target.size());
    if (n < 0) return FileError("read the link", file, errno);
    target.resize(static_cast<size_t>(n));
    file = target.empty() || target[0] == '/' ? target : absl::StrCat(Directory(file), "/", target);
  }
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes) {
  absl::StatusOr<std::string> file = ResolveOutputFile(path);
  if (!file.ok()) return file.status();
  const std::string tmp = *file + ".tmp";
  absl::Status status = WriteNewFileDurably(tmp, bytes);
  if (status.ok() && std::rename(tmp.c_str(), file->c_str()) != 0) {
    status = FileError(absl::StrCat("rename ", tmp, " to"), *file, errno);
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  return FsyncDirectory(Directory(*file));  // makes the rename itself durable
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
