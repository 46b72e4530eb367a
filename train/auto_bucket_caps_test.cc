// The pure steps of --bucket_cap_mb=auto (Note [Auto bucket caps]): the profile from measured iterations
// against hand-computed means, and the choice against links whose best caps are known.
#include "train/auto_bucket_caps.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "sim/link_model.h"
#include "sim/step_simulator.h"

namespace ddp {
namespace {

constexpr int64_t kMiBFloats = (1 << 20) / 4;

TEST(AutoBucketCapsTest, ProfileIsTheMeanOfTheIterationsWithAStepTime) {
  MeasuredIteration a;
  a.forward_s = 0.010;
  a.backward_s = 0.030;
  a.ready_s = {0.030, 0.010, -1};  // the third parameter got no gradient
  a.last_comm_end_s = 0.035;       // 5 ms exposed
  a.step_s = 0.050;                // other = 50 - 10 - 30 - 5 = 5 ms
  MeasuredIteration b = a;
  b.forward_s = 0.020;
  b.ready_s = {0.040, 0.020, -1};
  b.backward_s = 0.040;
  b.last_comm_end_s = 0.020;  // nothing exposed
  b.step_s = 0.070;           // other = 70 - 20 - 40 = 10 ms
  MeasuredIteration unfinished = a;
  unfinished.step_s = -1;  // its next forward was not seen: left out
  unfinished.forward_s = 1;
  absl::StatusOr<sim::ComputeProfile> profile =
      ProfileFromIterations({a, b, unfinished}, {"w", "b", "unused"}, {6, 2, 3}, {1, 0, 2});
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_DOUBLE_EQ(profile->forward_s, 0.015);
  EXPECT_DOUBLE_EQ(profile->backward_s, 0.035);
  EXPECT_DOUBLE_EQ(profile->other_s, 0.0075);
  ASSERT_EQ(profile->params.size(), 3u);
  EXPECT_EQ(profile->params[0].name, "w");
  EXPECT_EQ(profile->params[0].numel, 6);
  EXPECT_DOUBLE_EQ(profile->params[0].ready_s, 0.035);
  EXPECT_DOUBLE_EQ(profile->params[1].ready_s, 0.015);
  EXPECT_DOUBLE_EQ(profile->params[2].ready_s, 0.035) << "never ready: at the end of backward";
  EXPECT_EQ(profile->ready_order, (std::vector<size_t>{1, 0, 2}));
  EXPECT_DOUBLE_EQ(MeanStepSeconds({a, b, unfinished}), 0.060);

  EXPECT_FALSE(ProfileFromIterations({unfinished}, {"w", "b", "unused"}, {6, 2, 3}, {}).ok());
}

// Eight 1 MiB gradients, one every 5 ms of a 40 ms backward.
sim::ComputeProfile EightLayers() {
  sim::ComputeProfile profile;
  for (int i = 0; i < 8; ++i) profile.params.push_back({"p", kMiBFloats, 0.005 * (8 - i)});
  profile.forward_s = 0.010;
  profile.backward_s = 0.040;
  profile.other_s = 0.005;
  return profile;
}

// Exact samples of an all-reduce line t(n) = alpha + beta n.
std::vector<sim::Sample> LineSamples(double alpha_s, double beta_s_per_byte) {
  std::vector<sim::Sample> samples;
  for (double bytes : {16e3, 1e6, 8e6}) samples.push_back({bytes, alpha_s + beta_s_per_byte * bytes});
  return samples;
}

TEST(AutoBucketCapsTest, FitsTheContentionThatReproducesTheMeasuredStep) {
  const sim::ComputeProfile profile = EightLayers();
  const BucketCaps current{size_t{1} << 20, size_t{25} << 20};
  sim::SimOptions truth;
  truth.caps = current;
  truth.cluster.world_size = 2;
  truth.cluster.intra = sim::LinkFromRingFit(sim::LineFit{1e-3, 2e-9}, 2);
  truth.compute_lost_to_comm = 0.5;
  const double measured = sim::SimulateStep(profile, truth).step_s;
  absl::StatusOr<AutoCapsChoice> choice =
      ChooseAutoCaps(profile, LineSamples(1e-3, 2e-9), 2, current, measured, true, DefaultCapCandidates());
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_DOUBLE_EQ(choice->compute_lost_to_comm, 0.5);
  EXPECT_NEAR(choice->current_predicted_step_s, measured, 1e-9);
  EXPECT_NEAR(choice->link_fit.alpha_s, 1e-3, 1e-9);
  EXPECT_LE(choice->predicted_step_s, choice->current_predicted_step_s) << "the current caps are a candidate";
}

TEST(AutoBucketCapsTest, HighLatencyLinkChoosesFewBucketsFastBandwidthBoundLinkChoosesOverlap) {
  const sim::ComputeProfile profile = EightLayers();
  const BucketCaps current{size_t{1} << 20, size_t{25} << 20};
  // 50 ms per message, bandwidth free: every extra bucket costs 50 ms, so one bucket wins.
  absl::StatusOr<AutoCapsChoice> latency =
      ChooseAutoCaps(profile, LineSamples(0.050, 1e-12), 2, current, 0.2, true, DefaultCapCandidates());
  ASSERT_TRUE(latency.ok()) << latency.status();
  sim::SimOptions options;
  options.caps = latency->caps;
  EXPECT_EQ(sim::SimulatedBuckets(profile, options).size(), 1u) << CapsMiBLabel(latency->caps);
  // No latency, 4 ms per MiB: a bucket per layer overlaps all but the last layer's all-reduce with backward.
  sim::SimOptions no_contention;
  no_contention.caps = current;
  no_contention.cluster.world_size = 2;
  no_contention.cluster.intra = sim::LinkFromRingFit(sim::LineFit{0, 0.004 / (1 << 20)}, 2);
  const double measured =
      sim::SimulateStep(profile, no_contention).step_s;  // 1/25 measured without contention
  absl::StatusOr<AutoCapsChoice> bandwidth = ChooseAutoCaps(profile, LineSamples(0, 0.004 / (1 << 20)), 2,
                                                            current, measured, true, DefaultCapCandidates());
  ASSERT_TRUE(bandwidth.ok()) << bandwidth.status();
  options.caps = bandwidth->caps;
  EXPECT_EQ(sim::SimulatedBuckets(profile, options).size(), 8u) << CapsMiBLabel(bandwidth->caps);
  EXPECT_DOUBLE_EQ(bandwidth->compute_lost_to_comm, 0);
  // forward 10 + backward 40 + the last 1 MiB bucket's 4 ms + other 5.
  EXPECT_NEAR(bandwidth->predicted_step_s, 0.059, 1e-6);
}

TEST(AutoBucketCapsTest, KeepsTheCurrentCapsUnlessTheGainIsWorthIt) {
  const sim::ComputeProfile profile = EightLayers();
  const BucketCaps current{size_t{1} << 20, size_t{25} << 20};
  const std::vector<sim::Sample> link = LineSamples(0, 0.004 / (1 << 20));
  absl::StatusOr<AutoCapsChoice> any_gain =
      ChooseAutoCaps(profile, link, 2, current, 0.083, true, DefaultCapCandidates(), 0);
  ASSERT_TRUE(any_gain.ok()) << any_gain.status();
  const double gain = 1 - any_gain->predicted_step_s / any_gain->current_predicted_step_s;
  ASSERT_GT(gain, 0.1) << "eight buckets overlap what one large bucket exposes";
  absl::StatusOr<AutoCapsChoice> demanding =
      ChooseAutoCaps(profile, link, 2, current, 0.083, true, DefaultCapCandidates(), gain + 0.01);
  ASSERT_TRUE(demanding.ok()) << demanding.status();
  EXPECT_EQ(demanding->caps.bucket_cap_bytes, current.bucket_cap_bytes);
  EXPECT_EQ(demanding->caps.first_bucket_cap_bytes, current.first_bucket_cap_bytes);
  EXPECT_DOUBLE_EQ(demanding->predicted_step_s, demanding->current_predicted_step_s);
}

TEST(AutoBucketCapsTest, CandidatesAndLabels) {
  const std::vector<BucketCaps> candidates = DefaultCapCandidates();
  for (const BucketCaps& caps : candidates) EXPECT_LE(caps.first_bucket_cap_bytes, caps.bucket_cap_bytes);
  EXPECT_EQ(candidates.size(), 8u + 7 + 6 + 5 + 4 + 3);
  EXPECT_EQ(CapsMiBLabel(BucketCaps{}), "1/25");
  EXPECT_EQ(CapsMiBLabel(BucketCaps{size_t{1} << 18, size_t{1} << 18}), "0.25");
  EXPECT_EQ(CapsMiBLabel(BucketCaps{0, SIZE_MAX}), "0/inf");
}

}  // namespace
}  // namespace ddp
