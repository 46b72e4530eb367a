// ddp_sim: predict DDP step times before running. Subcommands:
//
//   ddp_sim fit --bench=allreduce.jsonl --out=link.json [--impl=ours] [--backend=gloo]
//       fits t(n) = alpha + beta n per world size to `bench/allreduce --format=json` rows and saves it with
//       the machine and date (Note [Link model]).
//   ddp_sim profile --trace=trace.json --model=cnn --out=profile.json [--rank=0] [--skip=10]
//                    [--iterations=FIRST-END,...]
//       the compute profile of a traced run (train/train --trace_out; Note [Profile from a trace]).
//   ddp_sim predict (--profile=FILE | --synthetic=mlp:W0,W1,... | --synthetic=resnet50) LINK
//       [--world_size=2] [--algorithm=ring] [--caps=0,0.25,1/25,...] [--per_bucket] [--no_overlap]
//       one row per cap setting: buckets, predicted step, communication and exposed communication (ms).
//   ddp_sim validate --profile=FILE LINK --sweep_csv=a.csv[,b.csv...] --out=validation.csv [--no_overlap]
//       predicted against measured for every row of bench/bucket_sweep.sh CSVs (several runs: the median
//       per row), with the errors and the measured cost of the predicted best cap.
//   ddp_sim scale (--profile=FILE | --synthetic=...) --presets=nvlink,100gbe,10gbe --ranks=2,4,...,1024
//       step time, weak-scaling efficiency, best caps and algorithm per preset and world size.
// Relative paths are the caller's, also under `bazel run`.
// LINK is --link=link.json (a fit; its world size's curve, read as a ring) or --alpha_us=A --gbps=B
// (bytes per second / 1e9 of one link) or --preset=NAME (Note [Cluster presets]); --burst_kib=K makes the
// link a token bucket of K KiB (Note [Token-bucket links]: a tc tbf link, as bench/bucket_sweep.sh --netns).
// Caps are MiB: "C" sets the first bucket cap and the bucket cap to C, "F/C" sets them apart, "inf" is
// one bucket. --comm_after_first_backward (predict, validate, scale) holds every all-reduce until the first
// rank has ended backward (ranks sharing one machine's cores at real-time priority), and
// --shared_core_link=FILE gives the link's speed until the last rank has (all communication on one core).
// Synthetic models take --batch, --tflops (sustained) and --mem_gbps (Note [Synthetic timing]).
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "sim/cli.h"

ABSL_FLAG(std::string, bench, "", "fit: bench/allreduce --format=json output (one JSON object per line)");
ABSL_FLAG(std::string, impl, "ours", "fit: which bench/allreduce rows to fit (ours | raw | shm | shm_buf)");
ABSL_FLAG(std::string, backend, "gloo", "fit: the backend name saved with the fit");
ABSL_FLAG(std::string, out, "", "fit/profile/validate: output file");
ABSL_FLAG(std::string, trace, "", "profile: Chrome trace from --trace_out");
ABSL_FLAG(std::string, model, "cnn", "profile: the model the trace ran (mlp | cnn | cnn_bn | resnet18)");
ABSL_FLAG(int, rank, 0, "profile: whose track to read");
ABSL_FLAG(int, skip, 10, "profile: iterations left out at the start");
ABSL_FLAG(std::string, iterations, "",
          "profile: only these iterations, \"first-end,...\" (end exclusive; bench/bucket_sweep_interleaved "
          "prints a configuration's)");
ABSL_FLAG(std::string, profile, "", "a compute profile JSON (ddp_sim profile, or hand-written)");
ABSL_FLAG(std::string, synthetic, "", "mlp:W0,W1,... or resnet50 instead of --profile");
ABSL_FLAG(int64_t, batch, 32, "synthetic: samples per rank");
ABSL_FLAG(double, tflops, 10, "synthetic: sustained TFLOP/s of one rank");
ABSL_FLAG(double, mem_gbps, 900, "synthetic: memory GB/s of one rank (optimizer step)");
ABSL_FLAG(std::string, link, "", "a link fit JSON (ddp_sim fit)");
ABSL_FLAG(int, link_world_size, 2, "which world size's fit of --link to use");
ABSL_FLAG(std::optional<double>, alpha_us, std::nullopt, "link latency per message (us, >= 0), with --gbps");
ABSL_FLAG(std::optional<double>, gbps, std::nullopt, "link bandwidth (GB/s, > 0), with --alpha_us");
ABSL_FLAG(double, burst_kib, 0,
          "the limited link's token-bucket depth in KiB of payload (tc tbf's burst; Note [Token-bucket "
          "links]); with --link or --alpha_us it is the link's, with --preset the inter-host link's");
ABSL_FLAG(std::string, preset, "", "a cluster preset: nvlink | 100gbe | 10gbe | dgx1_ib");
ABSL_FLAG(int, world_size, 2, "ranks");
ABSL_FLAG(std::string, algorithm, "ring", "ring | tree | hierarchical");
ABSL_FLAG(int, max_in_flight, 1, "collectives the backend runs at once (Gloo, NCCL on one stream: 1)");
ABSL_FLAG(double, compute_lost_to_comm, 0,
          "share of compute speed lost while an all-reduce runs (0: own engine; 1: takes the core)");
ABSL_FLAG(bool, comm_after_first_backward, false,
          "all-reduces start no earlier than the first rank's end of backward: ranks sharing one machine's "
          "cores, one each, at real-time priority (Note [Simulated schedule], step 6)");
ABSL_FLAG(
    std::string, shared_core_link, "",
    "with --comm_after_first_backward: a fit (ddp_sim fit) of bench/allreduce run with both ranks pinned "
    "to one core, the link's speed until the slowest rank ends backward; empty: the link's own");
ABSL_FLAG(std::string, caps, "0,0.0625,0.25,1,5,25,100,1/25", "predict: cap settings (MiB)");
ABSL_FLAG(bool, per_bucket, false, "predict: print every bucket's schedule");
ABSL_FLAG(bool, no_overlap, false,
          "predict, validate: launch every bucket after backward (the no_overlap ablation; a machine where "
          "communication waits for backward)");
ABSL_FLAG(std::string, sweep_csv, "",
          "validate: bench/bucket_sweep.sh's CSV; several (comma-separated): the median per configuration");
ABSL_FLAG(std::string, presets, "nvlink,100gbe,10gbe", "scale: cluster presets");
ABSL_FLAG(std::string, ranks, "2,4,8,16,32,64,128,256,512,1024", "scale: world sizes");

namespace ddp {
namespace sim {
namespace {

// Under `bazel run` the program runs in its runfiles folder: a relative path means the caller's.
std::string FromCaller(const std::string& path) {
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  if (workspace == nullptr || path.empty() || path[0] == '/') return path;
  return std::string(workspace) + "/" + path;
}

// A comma-separated list of paths, each through FromCaller.
std::string ListFromCaller(const std::string& paths) {
  std::string out;
  for (absl::string_view path : absl::StrSplit(paths, ',', absl::SkipEmpty())) {
    out += (out.empty() ? "" : ",") + FromCaller(std::string(path));
  }
  return out;
}

// The flags as the subcommands' inputs.
CliFlags ReadFlags() {
  CliFlags f;
  f.bench = FromCaller(absl::GetFlag(FLAGS_bench));
  f.impl = absl::GetFlag(FLAGS_impl);
  f.backend = absl::GetFlag(FLAGS_backend);
  f.out = FromCaller(absl::GetFlag(FLAGS_out));
  f.trace = FromCaller(absl::GetFlag(FLAGS_trace));
  f.model = absl::GetFlag(FLAGS_model);
  f.rank = absl::GetFlag(FLAGS_rank);
  f.skip = absl::GetFlag(FLAGS_skip);
  f.iterations = absl::GetFlag(FLAGS_iterations);
  f.profile = FromCaller(absl::GetFlag(FLAGS_profile));
  f.synthetic = absl::GetFlag(FLAGS_synthetic);
  f.rates.batch = absl::GetFlag(FLAGS_batch);
  f.rates.flop_per_s = absl::GetFlag(FLAGS_tflops) * 1e12;
  f.rates.memory_bytes_per_s = absl::GetFlag(FLAGS_mem_gbps) * 1e9;
  f.link = FromCaller(absl::GetFlag(FLAGS_link));
  f.link_world_size = absl::GetFlag(FLAGS_link_world_size);
  f.alpha_us = absl::GetFlag(FLAGS_alpha_us);
  f.gbps = absl::GetFlag(FLAGS_gbps);
  f.burst_kib = absl::GetFlag(FLAGS_burst_kib);
  f.preset = absl::GetFlag(FLAGS_preset);
  f.world_size = absl::GetFlag(FLAGS_world_size);
  f.algorithm = absl::GetFlag(FLAGS_algorithm);
  f.max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
  f.compute_lost_to_comm = absl::GetFlag(FLAGS_compute_lost_to_comm);
  f.comm_after_first_backward = absl::GetFlag(FLAGS_comm_after_first_backward);
  f.shared_core_link = FromCaller(absl::GetFlag(FLAGS_shared_core_link));
  f.caps = absl::GetFlag(FLAGS_caps);
  f.per_bucket = absl::GetFlag(FLAGS_per_bucket);
  f.no_overlap = absl::GetFlag(FLAGS_no_overlap);
  f.sweep_csv = ListFromCaller(absl::GetFlag(FLAGS_sweep_csv));
  f.presets = absl::GetFlag(FLAGS_presets);
  f.ranks = absl::GetFlag(FLAGS_ranks);
  return f;
}

}  // namespace
}  // namespace sim
}  // namespace ddp

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ddp_sim fit|profile|predict|validate|scale [flags] (see the top of sim/ddp_sim.cc)");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr, "usage: ddp_sim fit|profile|predict|validate|scale [flags] (see sim/ddp_sim.cc)\n");
    return 2;
  }
  absl::StatusOr<std::string> report = ddp::sim::RunSubcommand(args[1], ddp::sim::ReadFlags());
  if (!report.ok()) {
    std::fprintf(stderr, "ddp_sim: %s\n", std::string(report.status().message()).c_str());
    return 1;
  }
  std::fputs(report->c_str(), stdout);
  return 0;
}
