// How many CPUs this process may use, as a container or a launcher limits it.
#ifndef DDP_BASE_USABLE_CPUS_H_
#define DDP_BASE_USABLE_CPUS_H_

namespace ddp {

// The CPUs the calling thread may run on: its affinity mask (sched_getaffinity: taskset, numactl, a
// container's cpuset), capped by its cgroup's CPU quota (cgroup v2 cpu.max, else v1's cfs files; rounded
// up: docker --cpus=1.5 gives 2) when one is set. The online CPU count where the mask cannot be read. At
// least 1. Reads the kernel's files on every call.
int UsableCpus();

}  // namespace ddp

#endif  // DDP_BASE_USABLE_CPUS_H_
