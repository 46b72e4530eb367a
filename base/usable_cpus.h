// How many CPUs this process may use, as a container or a launcher limits it.
#ifndef DDP_BASE_USABLE_CPUS_H_
#define DDP_BASE_USABLE_CPUS_H_

#include "base/cgroup_dir.h"

namespace ddp {

// The CPUs the calling thread may run on: its affinity mask (sched_getaffinity: taskset, numactl, a
// container's cpuset), capped by its cgroup's CPU quota (CgroupCpuQuota, rounded up: docker --cpus=1.5
// gives 2) when one is set. The online CPU count where the mask cannot be read. At least 1. Reads the
// kernel's files on every call.
int UsableCpus();

// The CPU quota of this process's cgroup in CPUs (quota / period), the smallest on the way from its
// cgroup up to the hierarchy's mount point (a parent's quota binds its children): cgroup v2 cpu.max
// ("max 100000" is none), v1 cpu.cfs_quota_us / cpu.cfs_period_us (-1 is none). 0 when none is set or
// none can be read.
double CgroupCpuQuota(const KernelFiles& files = {});

}  // namespace ddp

#endif  // DDP_BASE_USABLE_CPUS_H_
