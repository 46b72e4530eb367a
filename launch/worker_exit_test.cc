// DescribeWorkerExit's wording and OomKillWatch's reading of the kernel's OOM kill counters (on fake
// kernel trees).
#include "launch/worker_exit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/fake_kernel_files.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

TEST(DescribeWorkerExitTest, ExitCodeSignalAndPeakMemory) {
  EXPECT_EQ(DescribeWorkerExit({.exit_code = 3}), "exit code 3");
  EXPECT_EQ(DescribeWorkerExit({.exit_code = 143, .signaled = true, .peak_rss_bytes = int64_t{80} << 20}),
            "exit code 143 (signal 15, SIGTERM; peak RSS 80.0 MiB)");
  EXPECT_EQ(DescribeWorkerExit({.exit_code = 137, .signaled = true, .sigkill_cause = "the cause"}),
            "exit code 137 (signal 9, SIGKILL): the cause");
}

// A v1 memory cgroup below the hierarchy's root, limited to 150 MiB, with `kills` OOM kills counted.
void WriteLimitedCgroup(const FakeKernelFiles& k, int kills) {
  k.Write("proc/mountinfo", "34 25 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  k.Write("proc/cgroup", "4:memory:/job\n");
  k.Write("sys/fs/cgroup/memory/job/memory.stat", "hierarchical_memory_limit 157286400\n");
  k.Write("sys/fs/cgroup/memory/job/memory.oom_control", "oom_kill " + std::to_string(kills) + "\n");
}

TEST(OomKillWatchTest, AKillInTheJobsCgroupNamesItsLimitOnce) {
  FakeKernelFiles k("cgroup_kill");
  WriteLimitedCgroup(k, 0);
  OomKillWatch watch(k.Files());
  WriteLimitedCgroup(k, 1);
  k.Write("proc/vmstat", "oom_kill 5\n");
  const std::string cause = watch.ExplainSigkill();
  EXPECT_THAT(cause,
              HasSubstr("the kernel's OOM killer killed 1 process of this job's memory cgroup (" + k.root() +
                        "/sys/fs/cgroup/memory/job) while it ran: its workers needed more than the "
                        "cgroup's limit of 150.0 MiB"));
  EXPECT_THAT(cause, HasSubstr("a smaller batch, fewer workers per node or more memory"));
  // The next SIGKILL without a new OOM kill came from elsewhere.
  EXPECT_EQ(watch.ExplainSigkill(),
            "the kernel's OOM killer killed nothing meanwhile, so the SIGKILL was sent (kill -9, a job "
            "scheduler, the worker itself)");
}

TEST(OomKillWatchTest, AnotherCgroupsKillOnTheHostIsNotBlamed) {
  FakeKernelFiles k("other_cgroup");
  WriteLimitedCgroup(k, 2);
  OomKillWatch watch(k.Files());
  k.Write("proc/vmstat", "oom_kill 9\n");  // the host counted kills, this job's cgroup none
  EXPECT_THAT(watch.ExplainSigkill(), HasSubstr("killed nothing meanwhile"));
}

TEST(OomKillWatchTest, InTheRootCgroupTheHostsCountDecides) {
  FakeKernelFiles k("root_cgroup");
  k.Write("proc/mountinfo", "34 25 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  k.Write("proc/cgroup", "4:memory:/\n");
  k.Write("sys/fs/cgroup/memory/memory.oom_control", "oom_kill 0\n");  // a root cgroup never counts
  OomKillWatch watch(k.Files());
  k.Write("proc/vmstat", "oom_kill 6\n");
  EXPECT_EQ(
      watch.ExplainSigkill(),
      "the kernel's OOM killer killed 2 processes on this host while the job ran: the host's 23.54 GiB ran "
      "out; a smaller batch, fewer workers per node or more memory avoids it");
}

TEST(OomKillWatchTest, NothingReadableSaysNothing) {
  KernelFiles files;
  files.mountinfo = files.self_cgroup = files.vmstat = files.meminfo = "/nonexistent/file";
  OomKillWatch watch(files);
  EXPECT_EQ(watch.ExplainSigkill(), "");
}

}  // namespace
}  // namespace ddp
