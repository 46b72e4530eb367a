// A fake tree of the kernel's files (/proc, /sys/fs/cgroup) for tests of what reads cgroups
// (base/cgroup_dir.h, base/memory_cgroup.h, base/usable_cpus.h).
#ifndef DDP_TESTING_FAKE_KERNEL_FILES_H_
#define DDP_TESTING_FAKE_KERNEL_FILES_H_

#include <string>

#include "base/cgroup_dir.h"

namespace ddp {

// A directory under the test's TEST_TMPDIR standing for "/". Starts with /proc/vmstat (oom_kill 4) and
// /proc/meminfo (MemTotal 24,683,784 kB); the test writes the rest.
class FakeKernelFiles {
 public:
  // REQUIRES: `name` is unique among the test's fake trees.
  explicit FakeKernelFiles(const std::string& name);

  // Writes `text` to `path` (relative to the fake root, e.g. "proc/cgroup"), making its directories.
  void Write(const std::string& path, const std::string& text) const;
  // The fake root's absolute path.
  const std::string& root() const { return root_; }
  // The files the cgroup readers take, all under the fake root.
  KernelFiles Files() const;

 private:
  std::string root_;
};

}  // namespace ddp

#endif  // DDP_TESTING_FAKE_KERNEL_FILES_H_
