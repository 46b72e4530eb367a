// A fake tree of the kernel's memory files (/proc, /sys/fs/cgroup) for tests of base/memory_cgroup.h
// and what reads it.
#ifndef DDP_TESTING_FAKE_KERNEL_FILES_H_
#define DDP_TESTING_FAKE_KERNEL_FILES_H_

#include <string>

#include "base/memory_cgroup.h"

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
  // ReadMemoryCgroupState's files, all under the fake root.
  KernelMemoryFiles Files() const;

 private:
  std::string root_;
};

}  // namespace ddp

#endif  // DDP_TESTING_FAKE_KERNEL_FILES_H_
