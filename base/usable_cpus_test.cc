// UsableCpus follows the calling thread's affinity mask and never exceeds the online CPUs.
#include "base/usable_cpus.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <thread>

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

}  // namespace
}  // namespace ddp
