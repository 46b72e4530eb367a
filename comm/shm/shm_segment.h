// POSIX shared-memory segments by name: what ShmChannel (and bench/shm_floor.h) map for every rank.
#ifndef DDP_COMM_SHM_SHM_SEGMENT_H_
#define DDP_COMM_SHM_SHM_SEGMENT_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace ddp {

// Maps the segment called `name` (e.g. "/ddp-shm-81-0-3fa2"): with `create`, a new one (O_EXCL) of
// `bytes`, all of them reserved at once (posix_fallocate), so that a /dev/shm too small for it fails
// here, with ResourceExhausted naming /dev/shm's size, what is free there and the bytes needed, instead
// of a SIGBUS at the first write past what it holds; a failed create removes the name again. Without
// `create`, an existing one, which must have exactly `bytes` bytes (FailedPrecondition otherwise: ranks
// started with different sizes). The descriptor is closed again; the mapping stays until munmap. Errors
// name the segment and the failing call. The caller unlinks the name of a segment it created (shm_unlink).
absl::StatusOr<char*> MapShmSegment(const std::string& name, size_t bytes, bool create);

// "/dev/shm has 1048576 bytes (1048576 free)": the size of the file system POSIX shared memory lives
// on, for errors; "/dev/shm: <error>" when it cannot be read.
std::string DescribeDevShm();

// 16 random hex digits, to make segment names unique.
std::string RandomShmSuffix();

}  // namespace ddp

#endif  // DDP_COMM_SHM_SHM_SEGMENT_H_
