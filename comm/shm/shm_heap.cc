#include "comm/shm/shm_heap.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ddp {
namespace {

constexpr size_t kPage = 4096;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Reserves `bytes` of address space (no memory, no swap reservation).
absl::StatusOr<char*> Reserve(size_t bytes) {
  void* base = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("reserving ", bytes, " bytes of address space: ", std::strerror(errno)));
  }
  return static_cast<char*>(base);
}

// Maps [from, to) of `fd` at the same offsets of the reserved range at `base`.
absl::Status MapRange(char* base, int fd, size_t from, size_t to) {
  void* at = mmap(base + from, to - from, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, static_cast<off_t>(from));
  if (at == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("mapping bytes [", from, ", ", to, ") of a shared heap: ",
                                                     std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Reserves the memory of [from, to) of `fd` (posix_fallocate), so that no later page fault needs a page
// the system cannot give (Note [Segments every rank can reserve] in comm/shm/shm_channel.cc).
absl::Status Commit(int fd, size_t from, size_t to) {
  int error;
  do {
    error = posix_fallocate(fd, static_cast<off_t>(from), static_cast<off_t>(to - from));
  } while (error == EINTR);
  if (error != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("reserving bytes [", from, ", ", to, ") of a shared heap: ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<ShmHeap>> ShmHeap::Create() {
  UniqueFd fd(memfd_create("ddp-shm-heap", MFD_CLOEXEC));
  if (!fd.valid()) return absl::UnavailableError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  DDP_ASSIGN_OR_RETURN(char* base, Reserve(kReservedBytes));
  return std::shared_ptr<ShmHeap>(new ShmHeap(std::move(fd), base));
}

ShmHeap::~ShmHeap() { munmap(base_, kReservedBytes); }

absl::Status ShmHeap::Grow(size_t bytes) {
  const size_t old = committed_.load(std::memory_order_relaxed);
  if (bytes > kReservedBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a shared heap of ", bytes, " bytes exceeds its reserved ", kReservedBytes, " bytes"));
  }
  if (ftruncate(fd_.get(), static_cast<off_t>(bytes)) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("growing a shared heap to ", bytes, " bytes: ", std::strerror(errno)));
  }
  absl::Status grown = Commit(fd_.get(), old, bytes);
  if (grown.ok()) grown = MapRange(base_, fd_.get(), old, bytes);
  if (!grown.ok()) {
    // Shrinks the memfd back; should that fail too, it stays larger than the mapping, which is harmless.
    [[maybe_unused]] const int restored = ftruncate(fd_.get(), static_cast<off_t>(old));
    return grown;
  }
  committed_.store(bytes, std::memory_order_release);
  return absl::OkStatus();
}

absl::StatusOr<char*> ShmHeap::Allocate(size_t bytes) {
  DDP_CHECK(bytes > 0) << "ShmHeap::Allocate of 0 bytes";
  const size_t need = RoundUp(bytes, kPage);
  absl::MutexLock lock(&mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const size_t offset = it->first;
    // Free gave the pages of large blocks back to the system: reserved again here, or the first touch
    // would fault them in (a no-op for pages still held).
    DDP_RETURN_IF_ERROR(Commit(fd_.get(), offset, offset + need));
    const size_t rest = it->second - need;
    free_.erase(it);
    if (rest > 0) free_[offset + need] = rest;
    used_[offset] = need;
    return base_ + offset;
  }
  // Grow: the new block starts at the last free block when that one reaches the end of the heap.
  const size_t committed = committed_.load(std::memory_order_relaxed);
  size_t offset = committed;
  if (!free_.empty()) {
    auto last = std::prev(free_.end());
    if (last->first + last->second == committed) {
      offset = last->first;
      free_.erase(last);
    }
  }
  if (absl::Status grown = Grow(offset + need); !grown.ok()) {
    if (offset < committed) free_[offset] = committed - offset;
    return grown;
  }
  used_[offset] = need;
  return base_ + offset;
}

void ShmHeap::Free(char* block) {
  absl::MutexLock lock(&mu_);
  const size_t offset = static_cast<size_t>(block - base_);
  auto used = used_.find(offset);
  DDP_CHECK(used != used_.end()) << "ShmHeap::Free of a pointer it did not allocate";
  size_t start = offset;
  size_t length = used->second;
  used_.erase(used);
  if (length >= kReleaseBytes) {
    // Gives the pages back to the system (every mapping, the peers' too, reads zeros there afterwards, and
    // Allocate reserves them again before the range is used); should it fail, the block stays committed.
    [[maybe_unused]] const int released =
        fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(start),
                  static_cast<off_t>(length));
  }
  auto next = free_.lower_bound(start);
  if (next != free_.end() && start + length == next->first) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      length += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = length;
}

int64_t ShmHeap::OffsetOf(const void* data, size_t bytes) const {
  const char* p = static_cast<const char*>(data);
  const size_t committed = committed_.load(std::memory_order_acquire);
  if (p < base_ || p > base_ + committed || bytes > static_cast<size_t>(base_ + committed - p)) return -1;
  return p - base_;
}

PeerHeap::~PeerHeap() {
  if (base_ != nullptr) munmap(base_, ShmHeap::kReservedBytes);
}

absl::Status PeerHeap::Open(pid_t pid, int fd) {
  const std::string path = absl::StrCat("/proc/", pid, "/fd/", fd);
  UniqueFd opened(open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!opened.valid()) {
    return absl::UnavailableError(absl::StrCat("cannot open a peer's shared heap ", path, ": ", std::strerror(errno)));
  }
  DDP_ASSIGN_OR_RETURN(base_, Reserve(ShmHeap::kReservedBytes));
  fd_ = std::move(opened);
  return absl::OkStatus();
}

absl::StatusOr<const char*> PeerHeap::At(uint64_t offset, size_t bytes) {
  DDP_CHECK(fd_.valid()) << "PeerHeap::At before Open";
  if (offset > ShmHeap::kReservedBytes || bytes > ShmHeap::kReservedBytes - offset) {
    return absl::DataLossError(absl::StrCat("a peer's shared-heap range [", offset, ", +", bytes,
                                            ") lies outside any heap"));
  }
  const size_t end = offset + bytes;
  if (end > mapped_) {
    struct stat st {};
    if (fstat(fd_.get(), &st) != 0 || static_cast<size_t>(st.st_size) < end) {
      return absl::DataLossError(absl::StrCat("a peer's shared heap has ", st.st_size, " bytes, fewer than the ",
                                              end, " its collective refers to"));
    }
    const size_t target = static_cast<size_t>(st.st_size);
    DDP_RETURN_IF_ERROR(MapRange(base_, fd_.get(), mapped_, target));
    mapped_ = target;
  }
  return base_ + offset;
}

}  // namespace ddp
