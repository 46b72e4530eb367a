// Note [The launch environment]: the contract between a launcher and its workers, one type for both
// sides. Who this process is in a job (rank, world size, local rank), where its rendezvous is (MASTER_*
// and our store's DDP_STORE_*), whether the launcher hosts that store, and which restart of the group
// this is. ddprun writes it into each worker's environment (LaunchEnvVariables, from launch/worker_env.h);
// InitProcessGroup and train/ read it (ResolveLaunchEnv), from torchrun's variables or, when RANK is
// absent, from OpenMPI's or Slurm's. Pure (the environment is passed in), so every rule is unit-tested,
// and written-then-read is tested to give back what was written.
#ifndef DDP_COMM_LAUNCH_ENV_H_
#define DDP_COMM_LAUNCH_ENV_H_

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ddp {

// Looks up an environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// The real process environment.
EnvLookup ProcessEnv();

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR, else derived (below), else loopback
  int master_port = 29500;                // MASTER_PORT
  // Where our TCP store is: DDP_STORE_ADDR/DDP_STORE_PORT when set (ddprun's and Spawn's own store,
  // Note [Two ports] in launch/worker_env.h), else master_addr/master_port.
  std::string store_addr = "127.0.0.1";
  int store_port = 29500;
  std::string source = "default";        // "torchrun", "openmpi", "slurm" or "default" (nothing set)
  // Which start of the worker group this is (0: the first; ddprun --max_restarts counts up):
  // DDP_RESTART_COUNT, else torchrun's TORCHELASTIC_RESTART_COUNT, else 0. Rendezvous keys and
  // per-attempt outputs are namespaced by it.
  int restart_count = 0;
  // DDP_STORE_IN_LAUNCHER=1: the launcher hosts the store at store_addr:store_port, so rank 0 must not.
  bool store_in_launcher = false;
  // DDP_JOB_ID: the launcher's name for this job (ddprun and Spawn make a random one per job), which
  // every rank presents at rendezvous (store/rank_claim.h); "" for ranks started by hand.
  std::string job_id;
};

// The variables that carry `launch` to a worker: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, DDP_STORE_ADDR, DDP_STORE_PORT, DDP_RESTART_COUNT, TORCHELASTIC_RESTART_COUNT
// and, when store_in_launcher, DDP_STORE_IN_LAUNCHER=1, and DDP_JOB_ID when job_id is not empty. ResolveLaunchEnv of exactly these gives back
// `launch` (with source "torchrun").
std::map<std::string, std::string> LaunchEnvVariables(const LaunchEnv& launch);

// Resolves the launch environment:
//   * RANK set: torchrun's RANK, WORLD_SIZE (required), LOCAL_RANK, LOCAL_WORLD_SIZE (default: rank and
//     world size), MASTER_ADDR, MASTER_PORT.
//   * else OMPI_COMM_WORLD_RANK set: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} (mpirun).
//   * else SLURM_PROCID set: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and this node's (SLURM_NODEID)
//     entry of SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE, compressed forms such as "2(x3),1"
//     included (srun).
//   * else a single process: rank 0 of 1.
// MASTER_ADDR, when unset, is derived: under mpirun, 127.0.0.1 on one node (OMPI_MCA_orte_num_nodes=1),
// else the first IPv4 address of mpirun's host (OMPI_MCA_orte_hnp_uri; right when rank 0 runs there,
// mpirun's default mapping when it runs on the first host); under srun, 127.0.0.1 on one node
// (SLURM_STEP_NUM_NODES or SLURM_NNODES = 1), else the first host of SLURM_STEP_NODELIST (else
// SLURM_JOB_NODELIST, SLURM_NODELIST), where srun puts rank 0. MASTER_PORT defaults to 29500.
// `rank` / `world_size` >= 0 are explicit values that override nothing: they must agree with the
// environment when it sets them too. Errors name the variable: missing, not an integer, out of range
// (RANK >= WORLD_SIZE) or contradicting the explicit value.
absl::StatusOr<LaunchEnv> ResolveLaunchEnv(const EnvLookup& env, int rank = -1, int world_size = -1);

// The collective timeout: DDP_TIMEOUT_S (seconds, > 0) when set, else `fallback` (300 s, PyTorch's).
absl::StatusOr<absl::Duration> ResolveTimeout(const EnvLookup& env, absl::Duration fallback = absl::Seconds(300));

// How long a rank whose collective failed waits for the others' failure reports
// (comm/failure_reports.h): DDP_FAILURE_REPORT_WINDOW_S (seconds, >= 0) when set, else `fallback`.
absl::StatusOr<absl::Duration> ResolveFailureReportWindow(const EnvLookup& env,
                                                          absl::Duration fallback = absl::Seconds(3));

}  // namespace ddp

#endif  // DDP_COMM_LAUNCH_ENV_H_
