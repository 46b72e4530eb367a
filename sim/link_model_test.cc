#include "sim/link_model.h"

#include <cmath>

#include "gtest/gtest.h"

namespace ddp {
namespace sim {
namespace {

Cluster OneHost(int p, double alpha, double beta) {
  Cluster c;
  c.world_size = p;
  c.intra = LinkSpec{alpha, beta};
  return c;
}

TEST(AllReduceSecondsTest, RingMatchesTheFormula) {
  // p = 4, alpha = 10 us, beta = 1 ns/B, n = 1 MB: 6 * 10 us + 2 * (3/4) * 1e6 * 1e-9 = 60 us + 1.5 ms.
  EXPECT_NEAR(AllReduceSeconds(AllReduceAlgorithm::kRing, OneHost(4, 10e-6, 1e-9), 1e6), 1.56e-3, 1e-12);
  // Reduction arithmetic adds (3/4) n gamma.
  Cluster c = OneHost(4, 10e-6, 1e-9);
  c.gamma_s_per_byte = 1e-10;
  EXPECT_NEAR(AllReduceSeconds(AllReduceAlgorithm::kRing, c, 1e6), 1.56e-3 + 0.75e-4, 1e-12);
}

TEST(AllReduceSecondsTest, TreeMatchesTheFormula) {
  // p = 5: ceil(log2 5) = 3, so 6 alpha + 2 n beta = 60 us + 2 ms.
  EXPECT_NEAR(AllReduceSeconds(AllReduceAlgorithm::kTree, OneHost(5, 10e-6, 1e-9), 1e6), 2.06e-3, 1e-12);
}

TEST(AllReduceSecondsTest, HierarchicalUsesBothLinks) {
  // 8 ranks, 4 per host, 2 hosts; intra alpha 1 us beta 0.1 ns/B, inter alpha 10 us beta 1 ns/B, n = 1 MB:
  // intra 2 * (3 * 1 us + 0.75 * 1e6 * 1e-10) = 2 * (3 us + 75 us) = 156 us;
  // inter 2 * (1 * 10 us + 0.5 * 1e6 * 1e-9) = 2 * (10 us + 500 us) = 1020 us.
  Cluster c;
  c.world_size = 8;
  c.ranks_per_host = 4;
  c.intra = LinkSpec{1e-6, 1e-10};
  c.inter = LinkSpec{10e-6, 1e-9};
  EXPECT_NEAR(AllReduceSeconds(AllReduceAlgorithm::kHierarchical, c, 1e6), 1176e-6, 1e-12);
  // A flat ring over the same hosts runs at the inter-host link's pace: 14 * 10 us + 1.75 ms.
  EXPECT_NEAR(AllReduceSeconds(AllReduceAlgorithm::kRing, c, 1e6), 1.89e-3, 1e-12);
}

TEST(AllReduceSecondsTest, OneHostHierarchicalIsARing) {
  Cluster c = OneHost(4, 10e-6, 1e-9);
  EXPECT_DOUBLE_EQ(AllReduceSeconds(AllReduceAlgorithm::kHierarchical, c, 1e6),
                   AllReduceSeconds(AllReduceAlgorithm::kRing, c, 1e6));
  EXPECT_EQ(AllReduceSeconds(AllReduceAlgorithm::kRing, OneHost(1, 10e-6, 1e-9), 1e6), 0);
}

TEST(AllReduceSecondsWithTokensTest, BurstCoversTheFirstBytesOfTheLimitedLink) {
  // Ring of 4 at 1 ns/B moves 1.5 MB per direction for n = 1 MB (1.56 ms). 500 KB of burst saves 0.5 ms
  // and is used up; 2 MB of burst covers all 1.5 MB (only the 60 us of latency remain) and 0.5 MB is left.
  Cluster c = OneHost(4, 10e-6, 1e-9);
  c.intra.burst_bytes = 2e6;
  double tokens = 5e5;
  EXPECT_NEAR(AllReduceSecondsWithTokens(AllReduceAlgorithm::kRing, c, 1e6, &tokens), 1.06e-3, 1e-12);
  EXPECT_EQ(tokens, 0);
  tokens = 2e6;
  EXPECT_NEAR(AllReduceSecondsWithTokens(AllReduceAlgorithm::kRing, c, 1e6, &tokens), 60e-6, 1e-12);
  EXPECT_NEAR(tokens, 5e5, 1e-6);
}

TEST(BurstLimitedLinkTest, HierarchicalIsLimitedByTheInterHostLink) {
  // 8 ranks, 4 per host: the host sends 2 * (1/2) * n on the inter-host link; a flat ring over the same
  // hosts is limited by its slowest link (the inter-host one) and sends 2 * (7/8) * n.
  Cluster c;
  c.world_size = 8;
  c.ranks_per_host = 4;
  c.intra = LinkSpec{1e-6, 1e-10, 0};
  c.inter = LinkSpec{10e-6, 1e-9, 4096};
  const BurstLimit hier = BurstLimitedLink(AllReduceAlgorithm::kHierarchical, c, 1e6);
  EXPECT_EQ(hier.link.burst_bytes, 4096);
  EXPECT_NEAR(hier.bytes_per_direction, 1e6, 1e-6);
  const BurstLimit ring = BurstLimitedLink(AllReduceAlgorithm::kRing, c, 1e6);
  EXPECT_EQ(ring.link.burst_bytes, 4096);
  EXPECT_NEAR(ring.bytes_per_direction, 1.75e6, 1e-6);
}

TEST(FitLineTest, RecoversAnExactLine) {
  std::vector<Sample> samples;
  for (double n = 4; n <= 64 << 20; n *= 4) samples.push_back({n, 50e-6 + n * 1e-9});
  absl::StatusOr<LineFit> fit = FitLine(samples);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->alpha_s, 50e-6, 1e-12);
  EXPECT_NEAR(fit->beta_s_per_byte, 1e-9, 1e-18);
  EXPECT_LT(fit->max_relative_error, 1e-9);
  EXPECT_EQ(fit->samples, static_cast<int>(samples.size()));
}

TEST(FitLineTest, NoisyLineStaysClose) {
  // +-5% alternating noise: the fit stays within a few percent and reports about 5% error.
  std::vector<Sample> samples;
  int sign = 1;
  for (double n = 1024; n <= 64 << 20; n *= 2, sign = -sign) {
    samples.push_back({n, (100e-6 + n * 2e-9) * (1 + 0.05 * sign)});
  }
  absl::StatusOr<LineFit> fit = FitLine(samples);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->alpha_s, 100e-6, 5e-6);
  EXPECT_NEAR(fit->beta_s_per_byte, 2e-9, 0.1e-9);
  EXPECT_NEAR(fit->median_relative_error, 0.05, 0.01);
}

TEST(FitLineTest, ClampsANegativeIntercept) {
  // Pure bandwidth with a dip at the small end would give alpha < 0; it is clamped to 0.
  absl::StatusOr<LineFit> fit = FitLine({{1000, 0.5e-6}, {2000, 2e-6}, {4000, 4e-6}});
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->alpha_s, 0);
  EXPECT_GT(fit->beta_s_per_byte, 0);
}

TEST(FitLineTest, RejectsTooLittleData) {
  EXPECT_FALSE(FitLine({}).ok());
  EXPECT_FALSE(FitLine({{4, 1e-5}, {4, 2e-5}}).ok());
  EXPECT_FALSE(FitLine({{4, 1e-5}, {8, 0}}).ok());
}

TEST(LinkFromRingFitTest, RingFormulaGivesTheFitBack) {
  LineFit fit;
  fit.alpha_s = 300e-6;
  fit.beta_s_per_byte = 1.5e-9;
  const LinkSpec link = LinkFromRingFit(fit, 4);
  for (double n : {4.0, 1e5, 6.4e7}) {
    EXPECT_NEAR(
        AllReduceSeconds(AllReduceAlgorithm::kRing, OneHost(4, link.alpha_s, link.beta_s_per_byte), n),
        fit.alpha_s + fit.beta_s_per_byte * n, 1e-12);
  }
}

TEST(ParseAlgorithmTest, NamesRoundTrip) {
  for (auto a : {AllReduceAlgorithm::kRing, AllReduceAlgorithm::kTree, AllReduceAlgorithm::kHierarchical}) {
    EXPECT_EQ(*ParseAlgorithm(AlgorithmName(a)), a);
  }
  EXPECT_FALSE(ParseAlgorithm("butterfly").ok());
}

}  // namespace
}  // namespace sim
}  // namespace ddp
