// ShmHeap and PeerHeap: shared memory that the ranks of one host read in place, so that a collective on
// a buffer allocated here needs no staging copy (Note [Zero-copy all-reduce] in comm/shm/allreduce_two_shot.cc).
// The owner allocates blocks from a growable memfd; a peer maps the owner's memfd through
// /proc/<pid>/fd/<fd> and reads a block by its offset. A memfd has no name, so nothing is ever left in
// /dev/shm: the memory goes with the last mapping and descriptor, whatever way the processes end.
#ifndef DDP_COMM_SHM_SHM_HEAP_H_
#define DDP_COMM_SHM_SHM_HEAP_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/unique_fd.h"

namespace ddp {

// The owner's side: a first-fit allocator of page-aligned blocks over one memfd, which grows (never
// shrinks) inside a reserved range of addresses, so that a block never moves. Every block's memory is
// reserved when Allocate hands it out (posix_fallocate): touching it never faults in a page the system
// cannot give. Thread-safe.
class ShmHeap {
 public:
  // Address space reserved for the heap (and for each peer's mapping of it); no memory is committed.
  static constexpr size_t kReservedBytes = size_t{16} << 30;
  // Freed blocks at least this large return their memory to the system.
  static constexpr size_t kReleaseBytes = size_t{1} << 20;

  // An empty heap (a memfd of 0 bytes). Fails with the system's error (no memfd_create, no address space).
  static absl::StatusOr<std::shared_ptr<ShmHeap>> Create();
  ~ShmHeap();
  ShmHeap(const ShmHeap&) = delete;
  ShmHeap& operator=(const ShmHeap&) = delete;

  // The memfd's descriptor number in this process (what a peer opens as /proc/<pid>/fd/<fd>).
  int fd() const { return fd_.get(); }
  // `bytes` (> 0) of shared memory, page aligned, contents uninitialised, its memory reserved; or
  // ResourceExhausted when the reserved range or the system's memory is exhausted.
  absl::StatusOr<char*> Allocate(size_t bytes);
  // Returns a block from Allocate to the heap; a block of at least kReleaseBytes also gives its memory
  // back to the system (a rebuild's old buckets), a smaller one keeps it committed for later blocks.
  void Free(char* block);
  // The heap offset of [data, data + bytes) when it lies inside the heap's committed range, else -1.
  // Lock-free (read on every collective).
  int64_t OffsetOf(const void* data, size_t bytes) const;
  // The address of heap offset `offset` (as OffsetOf returned it) in this process.
  char* At(size_t offset) const { return base_ + offset; }
  // Bytes committed (the memfd's size).
  size_t committed_bytes() const { return committed_.load(std::memory_order_acquire); }

 private:
  ShmHeap(UniqueFd fd, char* base) : fd_(std::move(fd)), base_(base) {}
  // Grows the memfd and its mapping to `bytes` (mu_ held).
  absl::Status Grow(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const UniqueFd fd_;
  char* const base_;  // start of the reserved range
  std::atomic<size_t> committed_{0};
  absl::Mutex mu_;
  std::map<size_t, size_t> free_ ABSL_GUARDED_BY(mu_);  // offset -> length, coalesced
  std::map<size_t, size_t> used_ ABSL_GUARDED_BY(mu_);  // offset -> length
};

// A peer's side: rank `owner`'s heap mapped into this process on demand (the mapping grows as the owner's
// heap does). Not thread-safe (one thread, the group's worker, reads through it).
class PeerHeap {
 public:
  PeerHeap() = default;
  ~PeerHeap();
  PeerHeap(const PeerHeap&) = delete;
  PeerHeap& operator=(const PeerHeap&) = delete;

  // Opens the owner's memfd (`pid`'s descriptor `fd`), reserving the address range; maps nothing yet.
  // Fails with kUnavailable naming the path when the descriptor cannot be opened (the process exited,
  // or this process may not read its descriptors).
  absl::Status Open(pid_t pid, int fd);
  // The address of [offset, offset + bytes) of the owner's heap in this process, mapping more of it when
  // needed. Errors name the range and the system's error (the owner's heap is smaller than asked).
  absl::StatusOr<const char*> At(uint64_t offset, size_t bytes);

 private:
  UniqueFd fd_;
  char* base_ = nullptr;
  size_t mapped_ = 0;
};

}  // namespace ddp

#endif  // DDP_COMM_SHM_SHM_HEAP_H_
