#include "testing/fake_kernel_files.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

namespace ddp {

FakeKernelFiles::FakeKernelFiles(const std::string& name)
    : root_(std::string(std::getenv("TEST_TMPDIR")) + "/" + name) {
  ::mkdir(root_.c_str(), 0755);
  Write("proc/vmstat", "pgfault 10\noom_kill 4\n");
  Write("proc/meminfo", "MemTotal:       24683784 kB\nMemFree: 1 kB\n");
}

void FakeKernelFiles::Write(const std::string& path, const std::string& text) const {
  for (size_t slash = path.find('/'); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    ::mkdir((root_ + "/" + path.substr(0, slash)).c_str(), 0755);
  }
  std::ofstream(root_ + "/" + path) << text;
}

KernelFiles FakeKernelFiles::Files() const {
  KernelFiles files;
  files.mountinfo = root_ + "/proc/mountinfo";
  files.self_cgroup = root_ + "/proc/cgroup";
  files.vmstat = root_ + "/proc/vmstat";
  files.meminfo = root_ + "/proc/meminfo";
  files.mount_prefix = root_;
  return files;
}

}  // namespace ddp
