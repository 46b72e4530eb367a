#include "comm/shm/cpu_contention.h"

#include <sched.h>
#include <unistd.h>

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

TEST(RunnableEstimateTest, TheFirstSampleSetsTheMean) {
  RunnableEstimate estimate(2);
  EXPECT_FALSE(estimate.oversubscribed());
  estimate.Add(3);
  EXPECT_EQ(estimate.mean(), 3);
  EXPECT_TRUE(estimate.oversubscribed());
}

TEST(RunnableEstimateTest, OneBurstDoesNotFlipTheVerdictButLoadThatStaysDoesWithinThreeSamples) {
  RunnableEstimate estimate(2);
  estimate.Add(2);
  estimate.Add(4);  // a burst: mean 2.5
  EXPECT_FALSE(estimate.oversubscribed());
  estimate.Add(2);
  estimate.Add(2);
  EXPECT_FALSE(estimate.oversubscribed());
  int samples = 0;
  while (!estimate.oversubscribed()) {
    estimate.Add(3);  // one more thread than CPUs, for good
    ++samples;
  }
  EXPECT_LE(samples, 3);
  samples = 0;
  while (estimate.oversubscribed()) {
    estimate.Add(2);
    ++samples;
  }
  EXPECT_LE(samples, 3);
}

TEST(CpuContentionTest, SamplesAtMostOncePerInterval) {
  int reads = 0;
  CpuContention::Options options;
  options.sample_interval = absl::Milliseconds(1);
  CpuContention contention(
      2, [&]() -> std::optional<int> { return ++reads < 100 ? 3 : 2; }, options);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(contention.oversubscribed());
  EXPECT_TRUE(contention.Sample(t0));
  EXPECT_TRUE(contention.Sample(t0 + absl::Microseconds(999)));
  EXPECT_EQ(reads, 1);
  contention.Sample(t0 + absl::Milliseconds(1));
  EXPECT_EQ(reads, 2);
  EXPECT_EQ(contention.samples(), 2u);
  EXPECT_TRUE(contention.oversubscribed());
}

TEST(CpuContentionTest, AnUnknownCountIsSkippedAndNeverOversubscribes) {
  CpuContention contention(1, []() -> std::optional<int> { return std::nullopt; });
  EXPECT_FALSE(contention.Sample(absl::Now()));
  EXPECT_EQ(contention.samples(), 0u);
}

TEST(CpuContentionTest, TheProcessInstanceReadsTheHostsRunnableThreads) {
  const int policy = sched_getscheduler(0);
  if (policy == SCHED_FIFO || policy == SCHED_RR) GTEST_SKIP() << "a real-time thread skips its samples";
  CpuContention& contention = CpuContention::ForProcess();
  const uint64_t before = contention.samples();
  contention.Sample(absl::Now() + absl::Seconds(1));  // past any interval a previous sample started
  EXPECT_EQ(contention.samples(), before + 1) << "/proc/loadavg could not be read";
}

TEST(CpuContentionTest, ARealTimeThreadSkipsItsSamples) {
  uint64_t before = 0, after = 0;
  bool real_time = false;
  std::thread([&] {  // the policy is per thread: this one only
    sched_param param{};
    param.sched_priority = 1;
    real_time = sched_setscheduler(0, SCHED_FIFO, &param) == 0;
    CpuContention& contention = CpuContention::ForProcess();
    before = contention.samples();
    contention.Sample(absl::Now() + absl::Hours(1));  // past any interval a previous sample started
    after = contention.samples();
  }).join();
  if (!real_time) GTEST_SKIP() << "SCHED_FIFO is not permitted here";
  EXPECT_EQ(after, before);
}

}  // namespace
}  // namespace ddp
