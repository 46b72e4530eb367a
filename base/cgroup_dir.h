// Where this process's cgroup keeps a controller's files (cgroup v2, or v1's hierarchy of that
// controller), found as systemd and container runtimes do: through /proc/self/mountinfo and
// /proc/self/cgroup, so it works inside a container's cgroup namespace and outside one.
#ifndef DDP_BASE_CGROUP_DIR_H_
#define DDP_BASE_CGROUP_DIR_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ddp {

// Where the kernel's files are read from. The defaults are the running system's; tests point them at a
// fake tree.
struct KernelFiles {
  std::string mountinfo = "/proc/self/mountinfo";  // the cgroup2 and cgroup v1 mounts
  std::string self_cgroup = "/proc/self/cgroup";   // this process's cgroup paths
  std::string vmstat = "/proc/vmstat";             // the host's oom_kill counter (Linux >= 4.13)
  std::string meminfo = "/proc/meminfo";           // MemTotal
  // Prepended to every mount point read from `mountinfo` (a fake tree's root; "" for the real one).
  std::string mount_prefix;
};

// The lines of a small kernel file (/proc, /sys); none when it cannot be read.
std::vector<std::string> KernelFileLines(const std::string& path);

// One controller's directory for this process.
struct CgroupDir {
  std::string path;         // the directory of this process's cgroup
  std::string mount_point;  // the mount point of its hierarchy (path or an ancestor of it)
  bool v2 = false;          // the unified hierarchy (cgroup v2) rather than v1's
  // path and every ancestor up to the mount point, innermost first: where a limit set higher up is.
  std::vector<std::string> UpToMountPoint() const;
};

// The directory of this process's cgroup for `controller` ("memory", "cpu"): the cgroup v2 one when the
// unified hierarchy offers the controller there (its cgroup.controllers lists it), else the one of the
// v1 hierarchy mounted with it; nullopt when neither is mounted or readable. A process path outside the
// mount's root (another namespace's view) gives the mount point. Reads the files on every call.
std::optional<CgroupDir> FindCgroupDir(absl::string_view controller, const KernelFiles& files = {});

}  // namespace ddp

#endif  // DDP_BASE_CGROUP_DIR_H_
