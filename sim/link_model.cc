#include "sim/link_model.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/statistics.h"

namespace ddp {
namespace sim {
namespace {

// The link a flat algorithm runs at: the slowest one it crosses, with that link's burst.
LinkSpec SlowestLink(const Cluster& cluster, bool spans_hosts) {
  if (!spans_hosts) return cluster.intra;
  const bool inter_slower = cluster.inter.beta_s_per_byte >= cluster.intra.beta_s_per_byte;
  return LinkSpec{std::max(cluster.intra.alpha_s, cluster.inter.alpha_s),
                  std::max(cluster.intra.beta_s_per_byte, cluster.inter.beta_s_per_byte),
                  inter_slower ? cluster.inter.burst_bytes : cluster.intra.burst_bytes};
}

// Ranks per host (g) and hosts (h) of `cluster`.
std::pair<int, int> HostShape(const Cluster& cluster) {
  const int p = cluster.world_size;
  const int g = cluster.ranks_per_host <= 0 ? p : std::min(cluster.ranks_per_host, p);
  return {g, (p + g - 1) / g};
}

// A ring all-reduce of `bytes` over `p` members on `link`.
double RingSeconds(int p, const LinkSpec& link, double bytes, double gamma) {
  if (p <= 1) return 0;
  const double share = static_cast<double>(p - 1) / p;
  return 2.0 * (p - 1) * link.alpha_s + 2.0 * share * bytes * link.beta_s_per_byte + share * bytes * gamma;
}

// A pipelined binary-tree all-reduce of `bytes` over `p` members on `link`.
double TreeSeconds(int p, const LinkSpec& link, double bytes, double gamma) {
  if (p <= 1) return 0;
  const double depth = std::ceil(std::log2(static_cast<double>(p)));
  return 2.0 * depth * link.alpha_s + 2.0 * bytes * link.beta_s_per_byte + bytes * gamma;
}

// Note [Link model], hierarchical: intra reduce-scatter, inter all-reduce of a 1/g shard per rank (the
// g shard rings share the host's link), intra all-gather.
double HierarchicalSeconds(int g, int h, const Cluster& cluster, double bytes) {
  const double intra_share = static_cast<double>(g - 1) / g;
  const double inter_share = static_cast<double>(h - 1) / h;
  const LinkSpec& in = cluster.intra;
  const LinkSpec& out = cluster.inter;
  const double intra = 2.0 * ((g - 1) * in.alpha_s + intra_share * bytes * in.beta_s_per_byte);
  const double inter = h > 1 ? 2.0 * ((h - 1) * out.alpha_s + inter_share * bytes * out.beta_s_per_byte) : 0;
  const double reduce = (intra_share * bytes + inter_share * bytes / g) * cluster.gamma_s_per_byte;
  return intra + inter + reduce;
}


// Fills the error fields of `fit` from `samples`.
void MeasureFitError(const std::vector<Sample>& samples, LineFit* fit) {
  std::vector<double> errors;
  for (const Sample& s : samples) {
    errors.push_back(std::abs(fit->alpha_s + fit->beta_s_per_byte * s.bytes - s.seconds) / s.seconds);
  }
  fit->median_relative_error = Median(errors);
  fit->max_relative_error = *std::max_element(errors.begin(), errors.end());
  fit->samples = static_cast<int>(samples.size());
}

}  // namespace

absl::StatusOr<AllReduceAlgorithm> ParseAlgorithm(absl::string_view text) {
  if (text == "ring") return AllReduceAlgorithm::kRing;
  if (text == "tree") return AllReduceAlgorithm::kTree;
  if (text == "hierarchical") return AllReduceAlgorithm::kHierarchical;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown all-reduce algorithm \"", text, "\" (ring, tree or hierarchical)"));
}

std::string AlgorithmName(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kRing:
      return "ring";
    case AllReduceAlgorithm::kTree:
      return "tree";
    case AllReduceAlgorithm::kHierarchical:
      return "hierarchical";
  }
  return "?";
}

double AllReduceSeconds(AllReduceAlgorithm algorithm, const Cluster& cluster, double bytes) {
  const int p = cluster.world_size;
  DDP_CHECK(p >= 1 && bytes >= 0) << "world size " << p << ", bytes " << bytes;
  const auto [g, hosts] = HostShape(cluster);
  const double gamma = cluster.gamma_s_per_byte;
  switch (algorithm) {
    case AllReduceAlgorithm::kRing:
      return RingSeconds(p, SlowestLink(cluster, hosts > 1), bytes, gamma);
    case AllReduceAlgorithm::kTree:
      return TreeSeconds(p, SlowestLink(cluster, hosts > 1), bytes, gamma);
    case AllReduceAlgorithm::kHierarchical:
      return p <= 1 ? 0 : HierarchicalSeconds(g, hosts, cluster, bytes);
  }
  return 0;
}

BurstLimit BurstLimitedLink(AllReduceAlgorithm algorithm, const Cluster& cluster, double bytes) {
  const int p = cluster.world_size;
  DDP_CHECK(p >= 1 && bytes >= 0) << "world size " << p << ", bytes " << bytes;
  if (p <= 1) return BurstLimit{cluster.intra, 0};
  const auto [g, hosts] = HostShape(cluster);
  switch (algorithm) {
    case AllReduceAlgorithm::kRing:
      return BurstLimit{SlowestLink(cluster, hosts > 1), 2.0 * (p - 1) / p * bytes};
    case AllReduceAlgorithm::kTree:
      return BurstLimit{SlowestLink(cluster, hosts > 1), 2.0 * bytes};
    case AllReduceAlgorithm::kHierarchical:
      if (hosts <= 1) return BurstLimit{cluster.intra, 2.0 * (g - 1) / g * bytes};
      return BurstLimit{cluster.inter, 2.0 * (hosts - 1) / hosts * bytes};
  }
  return BurstLimit{};
}

double AllReduceSecondsWithTokens(AllReduceAlgorithm algorithm, const Cluster& cluster, double bytes,
                                  double* tokens) {
  DDP_CHECK(tokens != nullptr && *tokens >= 0) << "tokens must be a count >= 0";
  const double full = AllReduceSeconds(algorithm, cluster, bytes);
  const BurstLimit limit = BurstLimitedLink(algorithm, cluster, bytes);
  const double covered = std::min(*tokens, limit.bytes_per_direction);
  *tokens -= covered;
  return std::max(0.0, full - covered * limit.link.beta_s_per_byte);
}

absl::StatusOr<LineFit> FitLine(const std::vector<Sample>& samples) {
  std::set<double> sizes;
  for (const Sample& s : samples) {
    if (!(s.seconds > 0))
      return absl::InvalidArgumentError(absl::StrCat("a sample of ", s.bytes, " bytes has time ", s.seconds));
    sizes.insert(s.bytes);
  }
  if (sizes.size() < 2) return absl::InvalidArgumentError("fitting a line needs at least two distinct sizes");
  // Weighted normal equations, weights 1/t^2: [sw swn; swn swnn] [a; b] = [swt; swnt].
  double sw = 0, swn = 0, swnn = 0, swt = 0, swnt = 0;
  for (const Sample& s : samples) {
    const double w = 1.0 / (s.seconds * s.seconds);
    sw += w, swn += w * s.bytes, swnn += w * s.bytes * s.bytes, swt += w * s.seconds,
        swnt += w * s.bytes * s.seconds;
  }
  LineFit fit;
  const double det = sw * swnn - swn * swn;
  fit.alpha_s = (swt * swnn - swn * swnt) / det;
  fit.beta_s_per_byte = (sw * swnt - swn * swt) / det;
  if (fit.alpha_s < 0) fit = LineFit{0, swnt / swnn};
  if (fit.beta_s_per_byte < 0) fit = LineFit{swt / sw, 0};
  MeasureFitError(samples, &fit);
  return fit;
}

absl::StatusOr<Cluster> PresetCluster(absl::string_view name, int world_size) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("cluster preset \"", name, "\": world size ", world_size, " < 1"));
  }
  Cluster c;
  c.world_size = world_size;
  c.intra = LinkSpec{1e-6, 1.0 / 370e9};
  if (name == "nvlink") return c;
  c.ranks_per_host = 8;
  if (name == "100gbe") {
    c.inter = LinkSpec{10e-6, 1.0 / 11.25e9};
  } else if (name == "10gbe") {
    c.inter = LinkSpec{30e-6, 1.0 / 1.125e9};
  } else if (name == "dgx1_ib") {
    c.intra = LinkSpec{2e-6, 1.0 / 130e9};
    c.inter = LinkSpec{5e-6, 1.0 / 11.25e9};
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown cluster preset \"", name, "\" (nvlink, 100gbe, 10gbe or dgx1_ib)"));
  }
  return c;
}

LinkSpec LinkFromRingFit(const LineFit& fit, int world_size) {
  DDP_CHECK(world_size >= 2) << "a ring fit needs at least 2 ranks, got " << world_size;
  const double p = world_size;
  return LinkSpec{fit.alpha_s / (2.0 * (p - 1)), fit.beta_s_per_byte / (2.0 * (p - 1) / p)};
}

}  // namespace sim
}  // namespace ddp
