// ShmFloor: the leanest shared-memory all-reduce we can write, as a yardstick for ProcessGroupShm
// (bench/allreduce --impls=...,floor). Note [Floor all-reduce]: each rank's buffer lives in its own
// shared segment that every rank maps; rank r adds slice r of every peer's buffer into its own and
// writes each reduced block into every peer's buffer too, posts, and waits until every peer did the
// same. That is ProcessGroupShm's zero-copy algorithm (Note [Zero-copy all-reduce], Note [Pushing the
// reduced slices]) with
// nothing else: no Work, no queue or thread, no chunking, no futex sleeping (waits spin, yielding the
// core now and then so that oversubscribed ranks progress), so its time is what the memory system and
// the cross-core hand-offs of this machine allow for that algorithm. Not a backend: float32 sum only,
// one buffer per rank, no failure detection beyond a timeout.
#ifndef DDP_BENCH_SHM_FLOOR_H_
#define DDP_BENCH_SHM_FLOOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "store/store.h"

namespace ddp {

class ShmFloor {
 public:
  // Creates this rank's segment of `capacity_bytes` (plus a control page), exchanges names through
  // `store` (keys "floor/<rank>" and "floor/mapped/<rank>"), maps every rank's segment and unlinks its
  // own name once every rank has mapped them all (nothing is left in /dev/shm). Errors name the rank
  // that never arrived. REQUIRES: 0 <= rank < world.
  static absl::StatusOr<std::unique_ptr<ShmFloor>> Create(Store& store, int rank, int world,
                                                          size_t capacity_bytes, absl::Duration timeout);
  ~ShmFloor();
  ShmFloor(const ShmFloor&) = delete;
  ShmFloor& operator=(const ShmFloor&) = delete;

  // This rank's buffer (capacity_bytes, 64-byte aligned): the all-reduce's input and output.
  float* buffer() const;
  size_t capacity_bytes() const { return capacity_; }
  // Sums the first `count` floats of every rank's buffer into every rank's buffer. Every rank calls it
  // with the same count. Fails (DeadlineExceeded naming the peer) when a peer does not arrive within
  // the timeout. REQUIRES: count * 4 <= capacity_bytes.
  absl::Status AllReduce(size_t count);

 private:
  ShmFloor(int rank, int world, size_t capacity, absl::Duration timeout);
  // Spins until rank `peer`'s word `word` reached step_; DeadlineExceeded after the timeout.
  absl::Status WaitFor(int peer, int word);

  const int rank_;
  const int world_;
  const size_t capacity_;
  const absl::Duration timeout_;
  size_t segment_bytes_ = 0;
  std::vector<char*> segments_;  // index = rank
  uint32_t step_ = 0;
};

}  // namespace ddp

#endif  // DDP_BENCH_SHM_FLOOR_H_
