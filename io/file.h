// Whole-file I/O with one error policy, shared by every package that writes or reads files
// (nn/safetensors.cc, checkpoint/checkpoint.cc): atomic, durable writes and verified reads.
//
// Errors: every failure is an absl::Status whose message names the path and, for a failed system call,
// the errno text: "cannot create /ckpt/latest.tmp: Read-only file system". The code is
// absl::ErrnoToStatusCode(errno): NotFound (ENOENT: the file or a directory on its path is missing),
// PermissionDenied (EACCES, EPERM, EROFS), ResourceExhausted (ENOSPC, EDQUOT), OutOfRange (EFBIG),
// and so on. A verified read whose bytes differ from what was expected is DataLoss.
//
// Example:
//   DDP_RETURN_IF_ERROR(WriteFileAtomically("/out/w.bin", bytes));   // all or nothing
//   const FileFingerprint expected = FingerprintOf(bytes);            // e.g. kept in a manifest
//   absl::StatusOr<std::string> back = ReadFileVerified("/out/w.bin", expected);
//
// Thread safety: the functions share no state; concurrent calls on different paths are safe.
#ifndef DDP_IO_FILE_H_
#define DDP_IO_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddp {

// The error for system call failure `error` (an errno value) while doing `what` to `path`:
// "cannot <what> <path>: <strerror(error)>" with the code absl::ErrnoToStatusCode(error).
absl::Status FileError(absl::string_view what, absl::string_view path, int error);

// OK when `path` (through symbolic links) is a regular file, the only kind of input a reader here takes
// whole: a FIFO would block it until some other program writes, and a device such as /dev/zero may never
// end. Errors: the lookup's errno error (NotFound when missing: "cannot open <path>: No such file or
// directory"), or FailedPrecondition naming what it is instead:
//   "cannot read /dev/zero: it is a character device, not a regular file"
absl::Status CheckReadableFile(const std::string& path);

// Reads the whole file at `path`. Errors: CheckReadableFile's (checked on the opened file, which a FIFO
// without a writer does not block), or a failed read's.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// A regular file's bytes mapped into memory (private and copy-on-write: writes through them never reach
// the file), for inputs read whole once where a copy costs more than the rest of the reading (a model's
// weights). The mapping lives as long as the object. Whoever maps a file reads it while mapped and keeps
// copies, not views, of what it needs afterwards: a file truncated by another program while mapped makes
// reads past its new end fault (SIGBUS), as with any mmap.
class MappedFile {
 public:
  MappedFile(void* address, size_t size) : address_(address), size_(size) {}
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  absl::string_view bytes() const { return absl::string_view(static_cast<const char*>(address_), size_); }

 private:
  void* address_;  // null for an empty file
  size_t size_;
};

// Maps the whole file at `path`. Its pages are shared with the page cache until written (no copy; a
// written page becomes private). Errors: ReadFile's, or a failed mmap's.
absl::StatusOr<std::shared_ptr<const MappedFile>> MapFile(const std::string& path);

// Writes `bytes` to `path` (created, or truncated when it exists) and fsyncs it. Not atomic: a failure
// can leave `path` partly written, so use it only for files that become visible through a later
// rename (a directory published whole), and WriteFileAtomically for the rest.
absl::Status WriteFileDurably(const std::string& path, absl::string_view bytes);

// The file that a write to `path` replaces (Note [Output targets] in file.cc): `path` itself, or, when
// `path` is a symbolic link, the file it points to, as torch.save and shell redirection write through a
// link (followed up to 40 links deep; a relative target is taken against its link's directory). A link
// to a missing file resolves to that missing file, which the write then creates. Errors:
// FailedPrecondition when the file exists and is not a regular file (a directory, a device node such as
// /dev/null, a FIFO or a socket), naming it and what it is:
//   "cannot write /dev/null: it is a character device, not a regular file"
// and the errno error of a failed lookup (ELOOP for a cycle of links, EACCES, ...). Changes nothing.
absl::StatusOr<std::string> ResolveOutputFile(const std::string& path);

// Replaces the file at `path` (through symbolic links: ResolveOutputFile) with `bytes` all or nothing:
// writes "<file>.tmp" (a new file: whatever had that name is removed first, and a link there is never
// followed), fsyncs it, renames it over the file and fsyncs the directory. A `path` that is not a regular
// file (ResolveOutputFile's error) is refused before anything is written. On any failure (missing or
// read-only directory, disk full, ...) the previous file, if there was one, is unchanged and the
// temporary is removed; a crash leaves either the old or the new file. REQUIRES: no other writer of
// `path` at the same time ("<file>.tmp" is shared).
absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes);

// Fsyncs directory `dir`, making the names created, renamed or removed in it durable.
absl::Status FsyncDirectory(const std::string& dir);

// What a verified read expects of a file: its size and the FNV-1a 64 checksum of its bytes
// (base/fnv1a.h). Both are recorded when the file is written, e.g. in a manifest.
struct FileFingerprint {
  uint64_t size = 0;
  uint64_t fnv1a64 = 0;
};

// The fingerprint of `bytes`.
FileFingerprint FingerprintOf(absl::string_view bytes);

// Reads `path` (ReadFile) and checks its bytes against `expected`. A file of another size (truncated
// or extended) or with another checksum (corrupt) is DataLoss naming the path and both values.
absl::StatusOr<std::string> ReadFileVerified(const std::string& path, const FileFingerprint& expected);

}  // namespace ddp

#endif  // DDP_IO_FILE_H_
