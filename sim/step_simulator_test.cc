#include "sim/step_simulator.h"

#include <cmath>

#include "gtest/gtest.h"

namespace ddp {
namespace sim {
namespace {

// Four float32 parameters a, b, c, d (100, 200, 300, 400 elements = 400, 800, 1200, 1600 bytes), ready in
// reverse order at 4, 3, 2, 1 ms; forward 3 ms, backward 5 ms, other 1 ms.
ComputeProfile FourParameters() {
  ComputeProfile p;
  p.params = {{"a", 100, 4e-3}, {"b", 200, 3e-3}, {"c", 300, 2e-3}, {"d", 400, 1e-3}};
  p.forward_s = 3e-3;
  p.backward_s = 5e-3;
  p.other_s = 1e-3;
  return p;
}

// Caps of 2000 bytes: d (1600) + c (1200) close bucket 0 (2800 B, ready at 2 ms); b + a form bucket 1
// (1200 B, ready at 4 ms). Ring on 2 ranks with alpha 0.1 ms and beta 1 us/B: t(n) = 0.2 ms + n us.
SimOptions TwoBuckets() {
  SimOptions o;
  o.caps.first_bucket_cap_bytes = 2000;
  o.caps.bucket_cap_bytes = 2000;
  o.cluster.world_size = 2;
  o.cluster.intra = LinkSpec{1e-4, 1e-6};
  return o;
}

TEST(SimulateStepTest, TwoBucketsOneInFlight) {
  const StepPrediction p = SimulateStep(FourParameters(), TwoBuckets());
  ASSERT_EQ(p.buckets, (std::vector<std::vector<size_t>>{{3, 2}, {1, 0}}));
  // Bucket 0: 2 -> 5 ms (0.2 + 2.8). Bucket 1: ready and launched at 4 ms, waits for bucket 0: 5 -> 6.4 ms.
  EXPECT_EQ(p.bucket_times[0].bytes, 2800u);
  EXPECT_NEAR(p.bucket_times[0].start_s, 2e-3, 1e-12);
  EXPECT_NEAR(p.bucket_times[0].end_s, 5e-3, 1e-12);
  EXPECT_NEAR(p.bucket_times[1].launch_s, 4e-3, 1e-12);
  EXPECT_NEAR(p.bucket_times[1].start_s, 5e-3, 1e-12);
  EXPECT_NEAR(p.bucket_times[1].end_s, 6.4e-3, 1e-12);
  EXPECT_NEAR(p.exposed_comm_s, 1.4e-3, 1e-12);
  EXPECT_NEAR(p.comm_s, 4.4e-3, 1e-12);
  EXPECT_NEAR(p.overlapped_comm_s, 3e-3, 1e-12);
  EXPECT_NEAR(p.step_s, 3e-3 + 5e-3 + 1.4e-3 + 1e-3, 1e-12);
}

// Note [Straggler wait]: with 1 ms of step jitter on 2 ranks each all-reduce starts when the slowest rank
// launches it, 1 ms * sqrt(fraction of the 9 ms of compute done since the last sync) / sqrt(pi) late.
TEST(SimulateStepTest, AllReducesWaitForTheSlowestRank) {
  ComputeProfile profile = FourParameters();
  profile.step_jitter_s = 1e-3;
  const StepPrediction p = SimulateStep(profile, TwoBuckets());
  const double e2 = 1.0 / std::sqrt(M_PI);
  // Bucket 0 launches at 2 ms: 1 + 3 + 2 = 6 of 9 ms since the sync; it starts 0.4607 ms late, runs 3 ms.
  const double start0 = 2e-3 + 1e-3 * std::sqrt(6.0 / 9.0) * e2;
  EXPECT_NEAR(p.bucket_times[0].start_s, start0, 1e-12);
  EXPECT_NEAR(p.bucket_times[0].end_s, start0 + 3e-3, 1e-12);
  // Bucket 1 launches at 4 ms (8 of 9 ms): its slowest rank is there at 4.53 ms, after bucket 0's end.
  EXPECT_NEAR(p.bucket_times[1].start_s, start0 + 3e-3, 1e-12);
  EXPECT_NEAR(p.exposed_comm_s, start0 + 4.4e-3 - 5e-3, 1e-12);
  EXPECT_NEAR(p.straggler_s, 1e-3 * e2, 1e-12);
  EXPECT_NEAR(p.step_s, 3e-3 + 5e-3 + (start0 + 4.4e-3 - 5e-3) + 1e-3, 1e-12);
  // Two in flight: bucket 1 starts at its own straggler time, 4 ms + 1 ms * sqrt(8/9) / sqrt(pi).
  SimOptions two = TwoBuckets();
  two.max_in_flight = 2;
  const StepPrediction q = SimulateStep(profile, two);
  const double start1 = 4e-3 + 1e-3 * std::sqrt(8.0 / 9.0) * e2;
  EXPECT_NEAR(q.bucket_times[1].start_s, start1, 1e-12);
  EXPECT_NEAR(q.exposed_comm_s, start1 + 1.4e-3 - 5e-3, 1e-12);
  // One rank waits for nobody.
  SimOptions one = TwoBuckets();
  one.cluster.world_size = 1;
  EXPECT_EQ(SimulateStep(profile, one).straggler_s, 0.0);
}

TEST(SimulateStepTest, TwoInFlightRunTogether) {
  SimOptions o = TwoBuckets();
  o.max_in_flight = 2;
  const StepPrediction p = SimulateStep(FourParameters(), o);
  // Bucket 1 starts at its launch, 4 ms, and ends at 5.4 ms; the union of [2, 5] and [4, 5.4] is 3.4 ms.
  EXPECT_NEAR(p.bucket_times[1].start_s, 4e-3, 1e-12);
  EXPECT_NEAR(p.exposed_comm_s, 0.4e-3, 1e-12);
  EXPECT_NEAR(p.comm_s, 3.4e-3, 1e-12);
  EXPECT_NEAR(p.step_s, 9.4e-3, 1e-12);
}

TEST(SimulateStepTest, NoOverlapLaunchesAfterBackward) {
  SimOptions o = TwoBuckets();
  o.overlap = false;
  const StepPrediction p = SimulateStep(FourParameters(), o);
  // Both launch at 5 ms: 5 -> 8 ms, then 8 -> 9.4 ms; all 4.4 ms exposed.
  EXPECT_NEAR(p.bucket_times[0].start_s, 5e-3, 1e-12);
  EXPECT_NEAR(p.bucket_times[1].end_s, 9.4e-3, 1e-12);
  EXPECT_NEAR(p.exposed_comm_s, 4.4e-3, 1e-12);
  EXPECT_NEAR(p.overlapped_comm_s, 0, 1e-12);
  EXPECT_NEAR(p.step_s, 13.4e-3, 1e-12);
}

TEST(SimulateStepTest, LaunchWaitsForTheBucketBefore) {
  // The rebuild follows the recorded order d, a, c, b (bucket 0 = {d, a}, 2000 B, ready at 4 ms; bucket 1 =
  // {c, b}, 2000 B, ready at 3 ms): bucket 1 cannot launch before bucket 0, at 4 ms.
  ComputeProfile profile = FourParameters();
  profile.ready_order = {3, 0, 2, 1};
  const StepPrediction p = SimulateStep(profile, TwoBuckets());
  ASSERT_EQ(p.buckets, (std::vector<std::vector<size_t>>{{3, 0}, {2, 1}}));
  EXPECT_NEAR(p.bucket_times[1].ready_s, 3e-3, 1e-12);
  EXPECT_NEAR(p.bucket_times[1].launch_s, 4e-3, 1e-12);
  // Bucket 0: 4 -> 6.2 ms; bucket 1: 6.2 -> 8.4 ms.
  EXPECT_NEAR(p.bucket_times[1].end_s, 8.4e-3, 1e-12);
  EXPECT_NEAR(p.exposed_comm_s, 3.4e-3, 1e-12);
}

TEST(SimulateStepTest, WithoutRebuildBucketsFollowReverseRegistration) {
  ComputeProfile profile = FourParameters();
  profile.ready_order = {3, 0, 2, 1};
  SimOptions o = TwoBuckets();
  o.rebuild_buckets = false;
  EXPECT_EQ(SimulateStep(profile, o).buckets, (std::vector<std::vector<size_t>>{{3, 2}, {1, 0}}));
}

TEST(SimulateStepTest, WorldSizeOneCostsNothing) {
  SimOptions o = TwoBuckets();
  o.cluster.world_size = 1;
  const StepPrediction p = SimulateStep(FourParameters(), o);
  EXPECT_EQ(p.comm_s, 0);
  EXPECT_NEAR(p.step_s, 9e-3, 1e-12);
  EXPECT_NE(DescribePrediction(p).find("step 9.000 ms"), std::string::npos) << DescribePrediction(p);
}

TEST(SimulateStepTest, ContentionStretchesBackward) {
  SimOptions o = TwoBuckets();
  o.compute_lost_to_comm = 0.5;
  const StepPrediction p = SimulateStep(FourParameters(), o);
  // Bucket 0 runs 2 -> 5 ms while backward computes at half speed (3.5 ms of work done at 5 ms), so
  // bucket 1 is ready at 5.5 ms and runs 5.5 -> 6.9 ms; backward's last 1 ms of work: 0.7 ms of it at
  // half speed by 6.9 ms, the rest by 7.2 ms. Nothing is exposed; the step is 3 + 7.2 + 1 ms.
  EXPECT_NEAR(p.bucket_times[1].ready_s, 5.5e-3, 1e-12);
  EXPECT_NEAR(p.bucket_times[1].end_s, 6.9e-3, 1e-12);
  EXPECT_NEAR(p.backward_s, 7.2e-3, 1e-12);
  EXPECT_NEAR(p.exposed_comm_s, 0, 1e-12);
  EXPECT_NEAR(p.step_s, 11.2e-3, 1e-12);
  // When communication takes the whole core, overlap saves nothing: the step of
  // NoOverlapLaunchesAfterBackward.
  o.compute_lost_to_comm = 1;
  EXPECT_NEAR(SimulateStep(FourParameters(), o).step_s, 13.4e-3, 1e-12);
}

// Step 6 of Note [Simulated schedule]: with 1 ms of jitter on 2 ranks the first rank ends backward
// 1 ms / sqrt(pi) before this one (at 4.436 ms), and only then may an all-reduce run. Bucket 0 (launched at
// 2 ms, its slowest rank there at 2.46 ms) starts at 4.436 ms and runs 3 ms; bucket 1 follows it for 1.4 ms.
// Without jitter (or on one rank) nothing starts before backward ends: the no_overlap schedule.
TEST(SimulateStepTest, CommunicationWaitsForTheFirstRankToFreeItsCore) {
  ComputeProfile profile = FourParameters();
  profile.step_jitter_s = 1e-3;
  SimOptions o = TwoBuckets();
  o.comm_after_first_backward = true;
  const double first_end = 5e-3 - 1e-3 / std::sqrt(M_PI);
  StepPrediction p = SimulateStep(profile, o);
  EXPECT_NEAR(p.bucket_times[0].launch_s, 2e-3, 1e-12);
  EXPECT_NEAR(p.bucket_times[0].start_s, first_end, 1e-12);
  EXPECT_NEAR(p.bucket_times[1].start_s, first_end + 3e-3, 1e-12);
  EXPECT_NEAR(p.bucket_times[1].end_s, first_end + 4.4e-3, 1e-12);
  EXPECT_NEAR(p.step_s, 3e-3 + 1e-3 + first_end + 4.4e-3, 1e-12);
  // The no_overlap schedule starts bucket 0 when the slowest rank ends backward: 2/sqrt(pi) ms later.
  o.comm_after_first_backward = false;
  o.overlap = false;
  EXPECT_NEAR(SimulateStep(profile, o).step_s - p.step_s, 2e-3 / std::sqrt(M_PI), 1e-12);
  o.overlap = true;
  o.comm_after_first_backward = true;
  profile.step_jitter_s = 0;
  EXPECT_NEAR(SimulateStep(profile, o).step_s, 13.4e-3, 1e-12);
}

// Until the slowest rank ends backward (1 ms / sqrt(pi) after this one, at 5.564 ms) both ranks'
// communication shares the freed core; at half the link's speed there (6 ms for bucket 0's 2800 B instead of
// 3 ms), bucket 0 gets 1.128 / 6 of its work done by 5.564 ms and the rest takes 0.812 * 3 ms: it ends at
// 8 ms, and bucket 1 then runs at full speed to 9.4 ms.
TEST(SimulateStepTest, CommunicationOnTheFreedCoreRunsAtTheSharedCoreSpeed) {
  ComputeProfile profile = FourParameters();
  profile.step_jitter_s = 1e-3;
  SimOptions o = TwoBuckets();
  o.comm_after_first_backward = true;
  o.shared_core_link = LinkSpec{2e-4, 2e-6};
  const StepPrediction p = SimulateStep(profile, o);
  EXPECT_NEAR(p.bucket_times[0].start_s, 5e-3 - 1e-3 / std::sqrt(M_PI), 1e-12);
  EXPECT_NEAR(p.bucket_times[0].end_s, 8e-3, 1e-12);
  EXPECT_NEAR(p.bucket_times[1].start_s, 8e-3, 1e-12);
  EXPECT_NEAR(p.bucket_times[1].end_s, 9.4e-3, 1e-12);
  // A shared-core link as fast as the link changes nothing.
  o.shared_core_link = o.cluster.intra;
  SimOptions plain = o;
  plain.shared_core_link.reset();
  EXPECT_NEAR(SimulateStep(profile, o).step_s, SimulateStep(profile, plain).step_s, 1e-12);
}

TEST(SimulateStepTest, BurstCoversTheStartOfAnAllReduceAfterIdle) {
  // A 1000-byte burst (Note [Token-bucket links]): the steady state's link idles from 5.4 ms to the next
  // step's first start (9.4 + 2 ms), far longer than the 1 ms a refill takes, so bucket 0 starts with the
  // whole burst: 2 -> 4 ms (0.2 + 2.8 - 1.0); bucket 1 starts at once with none left: 4 -> 5.4 ms.
  SimOptions o = TwoBuckets();
  o.cluster.intra.burst_bytes = 1000;
  const StepPrediction p = SimulateStep(FourParameters(), o);
  EXPECT_NEAR(p.first_burst_bytes, 1000, 1e-9);
  EXPECT_NEAR(p.bucket_times[0].end_s, 4e-3, 1e-12);
  EXPECT_NEAR(p.bucket_times[1].start_s, 4e-3, 1e-12);
  EXPECT_NEAR(p.bucket_times[1].end_s, 5.4e-3, 1e-12);
  EXPECT_NEAR(p.exposed_comm_s, 0.4e-3, 1e-12);
  EXPECT_NEAR(p.step_s, 9.4e-3, 1e-12);
}

TEST(SimulateStepTest, BurstRefillsOnlyWhatTheIdleGapAllows) {
  // One 40,000-byte bucket ready at 1 ms; forward, backward and other 1 ms each. With a 10,000-byte burst
  // the link idles 3 ms a step (forward, backward before the launch, other), which refills 3,000 bytes at
  // 1 us/B: the all-reduce takes 0.2 + 40 - 3 = 37.2 ms and the step 1 + 1 + 37.2 + 1 = 40.2 ms.
  ComputeProfile profile;
  profile.params = {{"w", 10000, 1e-3}};
  profile.forward_s = profile.backward_s = profile.other_s = 1e-3;
  SimOptions o = TwoBuckets();
  o.cluster.intra.burst_bytes = 10000;
  const StepPrediction p = SimulateStep(profile, o);
  EXPECT_NEAR(p.first_burst_bytes, 3000, 1e-6);
  EXPECT_NEAR(p.comm_s, 37.2e-3, 1e-9);
  EXPECT_NEAR(p.step_s, 40.2e-3, 1e-9);
}

TEST(ChooseCapsTest, PicksTheShortestStep) {
  // One bucket of 4000 B launches at 4 ms and ends at 8.2 ms (exposed 3.2 ms); the 2000-byte caps give
  // 1.4 ms exposed (TwoBucketsOneInFlight); one bucket per parameter pays alpha four times:
  // d 1 -> 2.8, c 2.8 -> 4.2, b 4.2 -> 5.2, a 5.2 -> 5.8 ms: exposed 0.8 ms, the best.
  BucketCaps one{SIZE_MAX, SIZE_MAX}, two{2000, 2000}, per_param{0, 0};
  const CapChoice best = ChooseCaps(FourParameters(), TwoBuckets(), {one, two, per_param});
  EXPECT_EQ(best.caps.bucket_cap_bytes, 0u);
  EXPECT_NEAR(best.prediction.exposed_comm_s, 0.8e-3, 1e-12);
}

TEST(PresetClusterTest, NamesItsLinks) {
  absl::StatusOr<Cluster> c = PresetCluster("10gbe", 16);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ranks_per_host, 8);
  EXPECT_NEAR(1.0 / c->inter.beta_s_per_byte, 1.125e9, 1);
  EXPECT_FALSE(PresetCluster("infiniband", 16).ok());
}

}  // namespace
}  // namespace sim
}  // namespace ddp
