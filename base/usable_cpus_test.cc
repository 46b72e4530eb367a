// UsableCpus follows the calling thread's affinity mask and never exceeds the online CPUs; the cgroup CPU
// quota is found in this process's own cgroup or above it (fake kernel trees), and caps UsableCpus in a
// real cgroup where the test may make one.
#include "base/usable_cpus.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "testing/child_process.h"
#include "testing/fake_kernel_files.h"

namespace ddp {
namespace {

TEST(UsableCpusTest, FollowsTheAffinityMask) {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  EXPECT_GE(UsableCpus(), 1);
  EXPECT_LE(UsableCpus(), online);
  int pinned = 0;
  std::thread([&] {  // the mask is per thread: pinning this one leaves the test's other threads alone
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    if (sched_setaffinity(0, sizeof(one), &one) == 0) pinned = UsableCpus();
  })
      .join();
  EXPECT_EQ(pinned, 1);
}

TEST(CgroupCpuQuotaTest, CgroupV2TakesTheSmallestQuotaUpToTheMount) {
  FakeKernelFiles k("cpu_v2");
  k.Write("proc/mountinfo",
          "29 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n");
  k.Write("proc/cgroup", "0::/kubepods/pod1/c1\n");
  k.Write("sys/fs/cgroup/kubepods/pod1/c1/cgroup.controllers", "cpuset cpu memory pids\n");
  k.Write("sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "max 100000\n");
  k.Write("sys/fs/cgroup/kubepods/pod1/cpu.max", "150000 100000\n");  // the pod's limit binds the container
  k.Write("sys/fs/cgroup/kubepods/cpu.max", "max 100000\n");
  EXPECT_DOUBLE_EQ(CgroupCpuQuota(k.Files()), 1.5);
  k.Write("sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "50000 100000\n");
  EXPECT_DOUBLE_EQ(CgroupCpuQuota(k.Files()), 0.5);
  k.Write("sys/fs/cgroup/kubepods/pod1/c1/cgroup.controllers", "memory pids\n");  // no cpu controller there
  EXPECT_DOUBLE_EQ(CgroupCpuQuota(k.Files()), 0.0);
}

TEST(CgroupCpuQuotaTest, CgroupV1ReadsTheProcesssOwnCgroup) {
  FakeKernelFiles k("cpu_v1");
  k.Write("proc/mountinfo",
          "30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
          "31 25 0:27 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"
          "32 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n");
  k.Write("proc/cgroup", "5:cpuset:/\n3:cpu,cpuacct:/slurm/uid_0/job_7\n0::/\n");
  k.Write("sys/fs/cgroup/unified/cgroup.controllers", "");  // v2 mounted without controllers
  k.Write("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  k.Write("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  k.Write("sys/fs/cgroup/cpu,cpuacct/slurm/uid_0/job_7/cpu.cfs_quota_us", "300000\n");
  k.Write("sys/fs/cgroup/cpu,cpuacct/slurm/uid_0/job_7/cpu.cfs_period_us", "100000\n");
  EXPECT_DOUBLE_EQ(CgroupCpuQuota(k.Files()), 3.0);
  k.Write("proc/cgroup", "3:cpu,cpuacct:/\n");
  EXPECT_DOUBLE_EQ(CgroupCpuQuota(k.Files()), 0.0);
}

TEST(CgroupCpuQuotaTest, NothingReadableIsNoQuota) {
  KernelFiles files;
  files.mountinfo = files.self_cgroup = "/nonexistent/file";
  EXPECT_DOUBLE_EQ(CgroupCpuQuota(files), 0.0);
}

// A child process moved into a cgroup of its own with a quota of one CPU sees one usable CPU: the quota of
// the process's cgroup, not of the hierarchy's root, is the one that binds.
TEST(UsableCpusTest, ACgroupQuotaOfOneCpuGivesOne) {
  const std::optional<CgroupDir> parent = FindCgroupDir("cpu");
  if (!parent.has_value()) GTEST_SKIP() << "no cpu cgroup controller here";
  const std::string dir = absl::StrCat(parent->path, "/ddp_quota_test_", getpid());
  if (::mkdir(dir.c_str(), 0755) != 0) GTEST_SKIP() << "cannot make a cgroup in " << parent->path;
  const bool set =
      parent->v2 ? static_cast<bool>(std::ofstream(dir + "/cpu.max") << "100000 100000" << std::flush)
                 : static_cast<bool>(std::ofstream(dir + "/cpu.cfs_quota_us") << "100000" << std::flush);
  int usable = 0;
  const ChildRun run = RunInChild(
      [&]() -> std::string {
        if (!set) return "cannot set a CPU quota in " + dir;
        if (!(std::ofstream(dir + "/cgroup.procs") << getpid() << std::flush)) return "cannot join " + dir;
        return "";
      },
      [&]() -> absl::Status {
        usable = UsableCpus();
        return usable == 1
                   ? absl::OkStatus()
                   : absl::InternalError(absl::StrCat("UsableCpus() is ", usable, " under a 1-CPU quota"));
      });
  ::rmdir(dir.c_str());
  if (run.skipped) GTEST_SKIP() << run.status.message();
  EXPECT_TRUE(run.status.ok()) << run.status;
}

}  // namespace
}  // namespace ddp
