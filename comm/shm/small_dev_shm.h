// Test-only: a /dev/shm as small as a container's, for the tests of what happens when shared memory
// runs out (Note [Segments every rank can reserve] in comm/shm/shm_channel.cc).
#ifndef DDP_COMM_SHM_SMALL_DEV_SHM_H_
#define DDP_COMM_SHM_SMALL_DEV_SHM_H_

#include <cstddef>
#include <string>

namespace ddp {

// Moves the calling process into a private mount namespace and mounts a tmpfs of `bytes` (a multiple of
// the page size) on /dev/shm there; the rest of the system keeps its /dev/shm. Returns "" on success,
// else why it could not (not root, no mount namespaces): a RunInChild set-up (testing/child_process.h),
// which runs it in a forked child so that nothing leaks into the test process.
std::string MountSmallDevShm(size_t bytes);

}  // namespace ddp

#endif  // DDP_COMM_SHM_SMALL_DEV_SHM_H_
