// What Slurm and OpenMPI put in a task's environment, decoded: Slurm's compressed host lists and task
// counts, and the address of mpirun's host. Pure functions, used by ResolveLaunchEnv
// (store/launch_env.h) to find MASTER_ADDR and LOCAL_WORLD_SIZE when no launcher of ours set them.
#ifndef DDP_COMM_SCHEDULER_ENV_H_
#define DDP_COMM_SCHEDULER_ENV_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddp {

// The most host names ExpandSlurmNodeList produces; a longer expansion is an error (a typo such as
// node[1-99999999] must not exhaust memory).
inline constexpr size_t kMaxSlurmHosts = 1 << 20;

// Expands a Slurm host list (SLURM_JOB_NODELIST, SLURM_STEP_NODELIST) into host names, in order:
// "node[01-04,07],gpu5" -> node01 node02 node03 node04 node07 gpu5. Ranges keep the zero padding of
// their lower bound; several bracket groups in one name expand as a product ("r[1-2]n[1-2]" ->
// r1n1 r1n2 r2n1 r2n2). Errors (kInvalidArgument, naming the list) for unbalanced brackets, a bad or
// descending range, an empty list or more than kMaxSlurmHosts names.
absl::StatusOr<std::vector<std::string>> ExpandSlurmNodeList(absl::string_view list);

// Expands Slurm's tasks-per-node form (SLURM_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE) into one count per
// node: "2(x3),1" -> 2 2 2 1; "4" -> 4. Errors (kInvalidArgument, naming the value) for anything else.
absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(absl::string_view value);

// The first IPv4 address of mpirun's host in OpenMPI 4.x's OMPI_MCA_orte_hnp_uri, e.g.
// "461307904.0;tcp://10.0.0.5,192.168.1.5:43541;tcp6://[fd00::2]:55791" -> "10.0.0.5"; nullopt when
// the value holds no tcp:// entry.
std::optional<std::string> OpenMpiLauncherAddress(absl::string_view hnp_uri);

}  // namespace ddp

#endif  // DDP_COMM_SCHEDULER_ENV_H_
