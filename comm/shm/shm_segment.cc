#include "comm/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/unique_fd.h"

namespace ddp {

absl::StatusOr<char*> MapShmSegment(const std::string& name, size_t bytes, bool create) {
  UniqueFd fd(shm_open(name.c_str(), create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600));
  if (!fd.valid()) return absl::UnavailableError(absl::StrCat("shm_open(", name, "): ", std::strerror(errno)));
  if (create && ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("ftruncate(", name, ", ", bytes, "): ", std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    return absl::FailedPreconditionError(absl::StrCat("segment ", name, " has ", st.st_size, " bytes, expected ",
                                                      bytes, " (ranks started with different slot sizes?)"));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return absl::ResourceExhaustedError(absl::StrCat("mmap(", name, "): ", std::strerror(errno)));
  return static_cast<char*>(base);
}

std::string RandomShmSuffix() {
  std::random_device device;
  return absl::StrCat(absl::Hex(static_cast<uint64_t>(device()) << 32 | device()));
}

}  // namespace ddp
