// ReadMemoryCgroupState on fake kernel trees (cgroup v1, v2, a container's namespace, none) and on the
// running system.
#include "base/memory_cgroup.h"

#include <gtest/gtest.h>

#include <iostream>

#include "testing/fake_kernel_files.h"

namespace ddp {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(MemoryCgroupTest, CgroupV1MemoryControllerBesideAnEmptyV2Hierarchy) {
  FakeKernelFiles k("v1");
  k.Write("proc/mountinfo",
          "30 25 0:26 / /sys/fs/cgroup/unified rw,relatime shared:5 - cgroup2 cgroup2 rw\n"
          "33 25 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
          "34 25 0:30 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n");
  k.Write("proc/cgroup", "8:cpu:/\n4:memory:/jobs/abc\n0::/\n");
  k.Write("sys/fs/cgroup/memory/jobs/abc/memory.limit_in_bytes", "9223372036854771712\n");
  k.Write("sys/fs/cgroup/memory/jobs/abc/memory.stat", "cache 0\nhierarchical_memory_limit 157286400\n");
  k.Write("sys/fs/cgroup/memory/jobs/abc/memory.oom_control",
          "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
  const MemoryCgroupState s = ReadMemoryCgroupState(k.Files());
  EXPECT_EQ(s.cgroup_dir, k.root() + "/sys/fs/cgroup/memory/jobs/abc");
  EXPECT_FALSE(s.cgroup_is_mount_point);
  EXPECT_EQ(s.limit_bytes, 150 * kMiB);  // set on an ancestor: memory.stat's hierarchical limit
  EXPECT_EQ(s.cgroup_oom_kills, 2);
  EXPECT_EQ(s.host_oom_kills, 4);
  EXPECT_EQ(s.host_memory_bytes, int64_t{24683784} * 1024);
}

TEST(MemoryCgroupTest, CgroupV1WithoutALimit) {
  FakeKernelFiles k("v1_unlimited");
  k.Write("proc/mountinfo", "34 25 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  k.Write("proc/cgroup", "4:memory:/\n");
  k.Write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  k.Write("sys/fs/cgroup/memory/memory.stat", "hierarchical_memory_limit 9223372036854771712\n");
  k.Write("sys/fs/cgroup/memory/memory.oom_control", "oom_kill 0\n");
  const MemoryCgroupState s = ReadMemoryCgroupState(k.Files());
  EXPECT_EQ(s.cgroup_dir, k.root() + "/sys/fs/cgroup/memory");
  EXPECT_TRUE(s.cgroup_is_mount_point);
  EXPECT_FALSE(s.limit_bytes.has_value());
  EXPECT_EQ(s.cgroup_oom_kills, 0);
}

TEST(MemoryCgroupTest, CgroupV2TakesTheSmallestLimitUpToTheMount) {
  FakeKernelFiles k("v2");
  k.Write("proc/mountinfo",
          "29 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n");
  k.Write("proc/cgroup", "0::/slurm/job7/step0\n");
  k.Write("sys/fs/cgroup/memory.stat", "anon 0\n");  // the root has no memory.max
  k.Write("sys/fs/cgroup/slurm/memory.max", "max\n");
  k.Write("sys/fs/cgroup/slurm/job7/memory.max", "1073741824\n");
  k.Write("sys/fs/cgroup/slurm/job7/step0/memory.max", "2147483648\n");
  k.Write("sys/fs/cgroup/slurm/job7/step0/cgroup.controllers", "cpu memory pids\n");
  k.Write("sys/fs/cgroup/slurm/job7/step0/memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n");
  const MemoryCgroupState s = ReadMemoryCgroupState(k.Files());
  EXPECT_EQ(s.cgroup_dir, k.root() + "/sys/fs/cgroup/slurm/job7/step0");
  EXPECT_FALSE(s.cgroup_is_mount_point);
  EXPECT_EQ(s.limit_bytes, 1024 * kMiB);
  EXPECT_EQ(s.cgroup_oom_kills, 1);
}

TEST(MemoryCgroupTest, CgroupV2InsideAContainersNamespace) {
  // Without a cgroup namespace the mount's root is the container's cgroup and the process's path is the
  // host's; with one both are "/".
  FakeKernelFiles k("v2_container");
  k.Write("proc/mountinfo", "700 690 0:26 /docker/c1 /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n");
  k.Write("proc/cgroup", "0::/docker/c1\n");
  k.Write("sys/fs/cgroup/cgroup.controllers", "cpu io memory\n");
  k.Write("sys/fs/cgroup/memory.max", "536870912\n");
  k.Write("sys/fs/cgroup/memory.events", "oom_kill 0\n");
  MemoryCgroupState s = ReadMemoryCgroupState(k.Files());
  EXPECT_EQ(s.cgroup_dir, k.root() + "/sys/fs/cgroup");
  EXPECT_TRUE(s.cgroup_is_mount_point);
  EXPECT_EQ(s.limit_bytes, 512 * kMiB);
  EXPECT_EQ(s.cgroup_oom_kills, 0);

  k.Write("proc/cgroup", "0::/other/path\n");  // outside the mount's root: the mount point itself
  s = ReadMemoryCgroupState(k.Files());
  EXPECT_EQ(s.cgroup_dir, k.root() + "/sys/fs/cgroup");
}

TEST(MemoryCgroupTest, NothingReadableIsUnknown) {
  KernelFiles files;
  files.mountinfo = files.self_cgroup = files.vmstat = files.meminfo = "/nonexistent/file";
  const MemoryCgroupState s = ReadMemoryCgroupState(files);
  EXPECT_EQ(s.cgroup_dir, "");
  EXPECT_FALSE(s.limit_bytes.has_value());
  EXPECT_FALSE(s.cgroup_oom_kills.has_value());
  EXPECT_FALSE(s.host_oom_kills.has_value());
  EXPECT_FALSE(s.host_memory_bytes.has_value());
}

TEST(MemoryCgroupTest, TheRunningSystem) {
  const MemoryCgroupState s = ReadMemoryCgroupState();
  ASSERT_TRUE(s.host_memory_bytes.has_value());
  EXPECT_GT(*s.host_memory_bytes, 64 * kMiB);
  if (s.limit_bytes.has_value()) EXPECT_GT(*s.limit_bytes, 0);
  if (s.cgroup_oom_kills.has_value()) EXPECT_GE(*s.cgroup_oom_kills, 0);
  std::cout << "cgroup " << s.cgroup_dir << ", limit " << s.limit_bytes.value_or(-1) << ", OOM kills "
            << s.cgroup_oom_kills.value_or(-1) << " (host " << s.host_oom_kills.value_or(-1) << ")\n";
}

}  // namespace
}  // namespace ddp
