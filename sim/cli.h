// The subcommands of ddp_sim (sim/ddp_sim.cc): each reads its inputs (files named by flags), runs the pure
// model (link_model.h, step_simulator.h, profile.h) and returns the report to print. Kept apart from main
// so the flag plumbing stays in one place and the reports can be tested.
#ifndef DDP_SIM_CLI_H_
#define DDP_SIM_CLI_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reducer/bucket_assignment.h"
#include "sim/step_simulator.h"
#include "sim/synthetic_models.h"

namespace ddp {
namespace sim {

// Every flag of ddp_sim, with its default (the meaning of each is in sim/ddp_sim.cc's flag list).
struct CliFlags {
  std::string bench, impl = "ours", backend = "gloo", out;  // fit
  std::string trace, model = "cnn";                         // profile
  int rank = 0, skip = 10;                                  // profile
  std::string iterations;                                   // profile: "first-end,..." ranges
  std::string profile, synthetic;                           // the compute side
  SyntheticRates rates;                                     // synthetic models
  std::string link;                                         // the link: a fit file,
  int link_world_size = 2;                                  //   its world size,
  std::optional<double> alpha_us, gbps;                     //   or alpha and bandwidth (nullopt: not given),
  double burst_kib = 0;                                     //   its token-bucket depth,
  std::string preset;                                       //   or a preset
  int world_size = 2;
  std::string algorithm = "ring";
  int max_in_flight = 1;
  double compute_lost_to_comm = 0;
  bool comm_after_first_backward = false;                 // Note [Simulated schedule] step 6,
  std::string shared_core_link;                           //   its link while the ranks share one core
  std::string caps = "0,0.0625,0.25,1,5,25,100,1/25";     // predict
  bool per_bucket = false, no_overlap = false;            // predict
  std::string sweep_csv;                                  // validate
  std::string presets = "nvlink,100gbe,10gbe";            // scale
  std::string ranks = "2,4,8,16,32,64,128,256,512,1024";  // scale
};

// Checks every numeric flag, whatever the subcommand: counts and sizes within their ranges (--world_size
// and --max_in_flight >= 1, --link_world_size >= 2, --rank and --skip >= 0, --batch >= 1), rates finite
// and positive (--tflops, --mem_gbps, --gbps when given), times and depths finite and >= 0 (--alpha_us
// when given, --burst_kib), --compute_lost_to_comm within [0, 1], and every world size of --ranks.
// kInvalidArgument naming the flag and its value, e.g. "--gbps=0: must be > 0 (GB/s of one link)".
absl::Status CheckFlags(const CliFlags& flags);

// Runs subcommand `name` (fit, profile, predict, validate, scale) and returns what it prints, after
// CheckFlags. Errors name the flag or file at fault.
absl::StatusOr<std::string> RunSubcommand(absl::string_view name, const CliFlags& flags);

// Parses a caps list in MiB ("0,0.25,1/25,inf": "C" is first = bucket = C, "F/C" sets them apart, "inf"
// one bucket) into (label, caps) pairs. Errors (kInvalidArgument) quote the bad entry.
absl::StatusOr<std::vector<std::pair<std::string, BucketCaps>>> ParseCapsList(absl::string_view text);

}  // namespace sim
}  // namespace ddp

#endif  // DDP_SIM_CLI_H_
