// POSIX shared-memory segments by name: what ShmChannel (and bench/shm_floor.h) map for every rank.
#ifndef DDP_COMM_SHM_SHM_SEGMENT_H_
#define DDP_COMM_SHM_SHM_SEGMENT_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace ddp {

// Maps the segment called `name` (e.g. "/ddp-shm-81-0-3fa2"): with `create`, a new one (O_EXCL) sized to
// `bytes`; else an existing one, which must have exactly `bytes` bytes (FailedPrecondition otherwise:
// ranks started with different sizes). The descriptor is closed again; the mapping stays until munmap.
// Errors name the segment and the failing call. The caller unlinks the name (shm_unlink).
absl::StatusOr<char*> MapShmSegment(const std::string& name, size_t bytes, bool create);

// 16 random hex digits, to make segment names unique.
std::string RandomShmSuffix();

}  // namespace ddp

#endif  // DDP_COMM_SHM_SHM_SEGMENT_H_
