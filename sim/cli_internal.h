// Shared pieces of ddp_sim's subcommands (sim/cli.cc, sim/cli_reports.cc); not a public interface.
#ifndef DDP_SIM_CLI_INTERNAL_H_
#define DDP_SIM_CLI_INTERNAL_H_

#include <string>

#include "absl/status/statusor.h"
#include "sim/cli.h"

namespace ddp {
namespace sim {

// The compute profile named by --profile or --synthetic. Errors name the flag or file.
absl::StatusOr<ComputeProfile> LoadProfile(const CliFlags& flags);
// The simulation options of the flags: the cluster (--link, --alpha_us/--gbps or --preset) at
// `world_size` ranks, --algorithm and --max_in_flight; caps left at their defaults.
absl::StatusOr<SimOptions> LoadOptions(const CliFlags& flags, int world_size);
// Bytes of a cap written in MiB, "inf" for one bucket. kInvalidArgument quoting `mib` unless it is a
// finite number from 0 to 2^40 or "inf".
absl::StatusOr<size_t> CapBytes(absl::string_view mib);
// "1/25" for caps of 1 MiB and 25 MiB, "5" when both are 5 MiB, "inf" for one bucket.
std::string CapsLabel(const BucketCaps& caps);

// `ddp_sim validate` and `ddp_sim scale` (sim/ddp_sim.cc).
absl::StatusOr<std::string> RunValidate(const CliFlags& flags);
absl::StatusOr<std::string> RunScale(const CliFlags& flags);

}  // namespace sim
}  // namespace ddp

#endif  // DDP_SIM_CLI_INTERNAL_H_
