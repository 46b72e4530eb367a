// The communication side of the DDP cost model: what one all-reduce of n bytes costs on a cluster, under
// the ring, tree and hierarchical algorithms, and the fit of a measured all-reduce curve
// t(n) = alpha + beta * n. Pure functions, tested without processes.
//
// Note [Link model]
// A link moves one message of n bytes in alpha + n * beta seconds (alpha: per-message latency; beta:
// inverse bandwidth). Reducing n bytes costs n * gamma on a rank. With p ranks:
//   ring          2(p-1) alpha + 2((p-1)/p) n beta + ((p-1)/p) n gamma       (reduce-scatter + all-gather)
//   tree          2 ceil(log2 p) alpha + 2 n beta + n gamma                  (pipelined binary tree: reduce
//                 to the root, broadcast back; NCCL's tree has this shape)
//   hierarchical  g ranks per host, h hosts: intra-host reduce-scatter (ring), inter-host all-reduce of
//                 each rank's 1/g shard (g rings sharing the host's link, so the host moves n bytes as one
//                 ring would), intra-host all-gather:
//                 2(g-1) alpha_i + 2((g-1)/g) n beta_i + 2(h-1) alpha_e + 2((h-1)/h) n beta_e
//                 + ((g-1)/g) n gamma + ((h-1)/h)(n/g) gamma
// A flat ring or tree that spans hosts runs at the pace of its slowest link (the larger alpha and
// beta), because every step waits for the step before it.
// A measured curve t(n) = A + B n at world size p is turned into a link by reading it as a ring:
// alpha = A / (2(p-1)), beta = B / (2(p-1)/p) (LinkFromRingFit). The ring formula then gives back the
// measured curve exactly at p. For a ring, gamma scales with (p-1)/p n like beta, so no fit over sizes
// or world sizes can tell them apart: a measured curve's reduction arithmetic is folded into beta.
//
// Note [Token-bucket links]
// A rate-limited link (Linux tc tbf, which bench/bucket_sweep.sh --netns uses; a cloud NIC's policer) lets a
// burst through at line rate after it has idled: tokens accrue at the link's rate (1/beta bytes per second)
// up to burst_bytes, and each byte sent spends one. Bytes covered by tokens cost nothing; the rest cost beta
// each. An all-reduce that moves D bytes per direction over the limited link with T tokens in hand therefore
// takes AllReduceSeconds - min(T, D) beta and leaves max(0, T - D) tokens (the link then sends at its rate,
// so no tokens accrue while it is busy). The limited link is the one a flat algorithm runs at (the slowest
// it crosses, with that link's burst), and the inter-host link of the hierarchical algorithm (the intra
// link of one host). D is what one rank (for hierarchical: one host) sends on it: ring 2((p-1)/p) n, tree
// 2n, hierarchical 2((h-1)/h) n. A burst matters when the link idles long enough between all-reduces to
// refill it (burst * beta): e.g. 256 KB at 100 Mbit/s takes 21 ms to refill, so it shortens a model's
// communication only if the compute between its all-reduces is that long; sweeps at 1 Gbit/s refill it in 2 ms.
#ifndef DDP_SIM_LINK_MODEL_H_
#define DDP_SIM_LINK_MODEL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddp {
namespace sim {

// One link's cost of a message (Note [Link model]).
struct LinkSpec {
  double alpha_s = 0;          // per-message latency, seconds
  double beta_s_per_byte = 0;  // inverse bandwidth, seconds per byte (1 / bytes per second)
  double burst_bytes = 0;      // token-bucket depth (Note [Token-bucket links]); 0: no burst
};

// The all-reduce algorithms the model knows (Note [Link model]).
enum class AllReduceAlgorithm { kRing, kTree, kHierarchical };

// Parses "ring", "tree" or "hierarchical". Errors (kInvalidArgument) quote the text.
absl::StatusOr<AllReduceAlgorithm> ParseAlgorithm(absl::string_view text);
// "ring", "tree" or "hierarchical".
std::string AlgorithmName(AllReduceAlgorithm algorithm);

// Where the ranks sit and how they are connected.
struct Cluster {
  int world_size = 2;           // p: ranks in the job
  int ranks_per_host = 0;       // g: ranks on one host; 0 or >= world_size: one host (intra link only)
  LinkSpec intra;               // between two ranks on one host
  LinkSpec inter;               // between two hosts (used only when there are several hosts)
  double gamma_s_per_byte = 0;  // reduction arithmetic on one rank, seconds per byte reduced
};

// Seconds one all-reduce of `bytes` takes on `cluster` with `algorithm` (Note [Link model]). 0 for
// world size 1. REQUIRES: cluster.world_size >= 1, bytes >= 0.
double AllReduceSeconds(AllReduceAlgorithm algorithm, const Cluster& cluster, double bytes);

// The link whose token bucket limits an all-reduce under `algorithm` on `cluster`, and the bytes one rank
// (hierarchical: one host) sends on it per direction in an all-reduce of `bytes` (Note [Token-bucket links]).
struct BurstLimit {
  LinkSpec link;
  double bytes_per_direction = 0;
};
// REQUIRES: what AllReduceSeconds requires.
BurstLimit BurstLimitedLink(AllReduceAlgorithm algorithm, const Cluster& cluster, double bytes);

// AllReduceSeconds when the limited link holds `*tokens` bytes of burst at the start; `*tokens` becomes what
// is left at the end (Note [Token-bucket links]). REQUIRES: tokens non-null, *tokens >= 0, and what
// AllReduceSeconds requires.
double AllReduceSecondsWithTokens(AllReduceAlgorithm algorithm, const Cluster& cluster, double bytes,
                                  double* tokens);

// Note [Cluster presets]
// Links we cannot measure, with every assumption named (alpha per message, bandwidth per direction):
//   nvlink   one NVLink-class fabric joins every rank (an NVSwitch domain, idealised beyond its real size):
//            alpha 1 us, 370 GB/s bus bandwidth (beta = 1 / 370e9 s/B).
//   100gbe   hosts of 8 ranks on that NVLink-class fabric, hosts joined by 100 Gb/s Ethernet at 90% of line
//            rate (11.25 GB/s), alpha 10 us (RDMA-class messaging).
//   10gbe    the same hosts joined by 10 Gb/s Ethernet at 90% of line rate (1.125 GB/s), alpha 30 us (TCP).
//   dgx1_ib  the PyTorch DDP paper's kind of cluster: hosts of 8 V100s on NVLink (NCCL all-reduce bus
//            bandwidth about 130 GB/s, alpha 2 us), hosts joined by 100 Gb/s InfiniBand (11.25 GB/s, alpha 5
//            us).
// The reduction arithmetic runs on the GPU at memory speed and is folded into the bus bandwidth (gamma 0).
// Errors (kInvalidArgument) name the unknown preset or a world size below 1.
absl::StatusOr<Cluster> PresetCluster(absl::string_view name, int world_size);

// One measurement: an all-reduce of `bytes` took `seconds`.
struct Sample {
  double bytes = 0;
  double seconds = 0;
};

// A fitted line t(n) = alpha + beta n over samples, and how well it fits.
struct LineFit {
  double alpha_s = 0;
  double beta_s_per_byte = 0;
  double median_relative_error = 0;  // median over the samples of |fit - measured| / measured
  double max_relative_error = 0;     // the largest of those
  int samples = 0;
};

// Fits t(n) = alpha + beta n by least squares on relative error (weights 1/t^2), so a curve measured
// from 4 B to 64 MiB is fitted at both ends rather than only at the largest sizes. A negative alpha or
// beta is clamped to 0 and the other refitted. Errors (kInvalidArgument): fewer than two distinct sizes,
// or a time that is not positive.
absl::StatusOr<LineFit> FitLine(const std::vector<Sample>& samples);

// The link that makes the ring formula reproduce a fitted all-reduce curve at `world_size` ranks
// (Note [Link model]). REQUIRES: world_size >= 2.
LinkSpec LinkFromRingFit(const LineFit& fit, int world_size);

}  // namespace sim
}  // namespace ddp

#endif  // DDP_SIM_LINK_MODEL_H_
