// The memory limit this process runs under and the OOM kills the kernel has counted, as a container,
// a Slurm step or systemd sets them: what a launcher needs to say why a worker died of SIGKILL.
#ifndef DDP_BASE_MEMORY_CGROUP_H_
#define DDP_BASE_MEMORY_CGROUP_H_

#include <cstdint>
#include <optional>
#include <string>

#include "base/cgroup_dir.h"

namespace ddp {

// What the kernel says about this process's memory. Every field is nullopt (or "") when its file is
// missing or unreadable: no cgroup memory controller, a cgroup v2 root (which has no memory.events),
// an old kernel.
struct MemoryCgroupState {
  // The directory of this process's memory cgroup (FindCgroupDir("memory")).
  std::string cgroup_dir;
  // cgroup_dir is its hierarchy's mount point: the host's root cgroup, or a container's namespace root.
  // The kernel counts no OOM kills in a root cgroup, so there cgroup_oom_kills may miss them.
  bool cgroup_is_mount_point = false;
  // The smallest memory limit on the way from this cgroup to the root, in bytes: v2 memory.max of the
  // cgroup and its ancestors, v1 memory.stat's hierarchical_memory_limit. nullopt when none is set.
  std::optional<int64_t> limit_bytes;
  // OOM kills counted in this cgroup and the cgroups below it: v2 memory.events "oom_kill", v1
  // memory.oom_control "oom_kill".
  std::optional<int64_t> cgroup_oom_kills;
  // OOM kills on the whole host since boot: /proc/vmstat "oom_kill".
  std::optional<int64_t> host_oom_kills;
  // The host's memory, bytes: /proc/meminfo MemTotal.
  std::optional<int64_t> host_memory_bytes;
};

// Reads the files now. Never fails: what cannot be read stays unknown. Cheap (a few small files).
MemoryCgroupState ReadMemoryCgroupState(const KernelFiles& files = {});

}  // namespace ddp

#endif  // DDP_BASE_MEMORY_CGROUP_H_
