#include "comm/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/unique_fd.h"

namespace ddp {
namespace {

// posix_fallocate, retried when a signal interrupts it; 0 or the error number.
int Reserve(int fd, size_t bytes) {
  int error;
  do {
    error = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  } while (error == EINTR);
  return error;
}

}  // namespace

std::string DescribeDevShm() {
  struct statvfs fs {};
  if (statvfs("/dev/shm", &fs) != 0) return absl::StrCat("/dev/shm: ", std::strerror(errno));
  return absl::StrCat("/dev/shm has ", static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize, " bytes (",
                      static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize, " free)");
}

absl::StatusOr<char*> MapShmSegment(const std::string& name, size_t bytes, bool create) {
  UniqueFd fd(shm_open(name.c_str(), create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600));
  if (!fd.valid()) return absl::UnavailableError(absl::StrCat("shm_open(", name, "): ", std::strerror(errno)));
  absl::Cleanup unlink_failed = [&] {
    if (create) shm_unlink(name.c_str());
  };
  if (create && ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("ftruncate(", name, ", ", bytes, "): ", std::strerror(errno)));
  }
  if (create) {
    if (const int error = Reserve(fd.get(), bytes); error != 0) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot reserve ", bytes, " bytes for shared-memory segment ",
                                                       name, ": ", std::strerror(error), "; ", DescribeDevShm()));
    }
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    return absl::FailedPreconditionError(absl::StrCat("segment ", name, " has ", st.st_size, " bytes, expected ",
                                                      bytes, " (ranks started with different slot sizes?)"));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return absl::ResourceExhaustedError(absl::StrCat("mmap(", name, "): ", std::strerror(errno)));
  std::move(unlink_failed).Cancel();
  return static_cast<char*>(base);
}

std::string RandomShmSuffix() {
  std::random_device device;
  return absl::StrCat(absl::Hex(static_cast<uint64_t>(device()) << 32 | device()));
}

}  // namespace ddp
