// The environment ddprun gives each worker (torchrun's variables plus ours). Pure functions.
#ifndef DDP_LAUNCH_WORKER_ENV_H_
#define DDP_LAUNCH_WORKER_ENV_H_

#include <map>
#include <string>

namespace ddp {

// What the launcher knows about the job when it starts a local worker group. The launcher's store and
// the workers' own rendezvous use two different ports on node 0 (Note [Two ports]).
struct JobLayout {
  int nproc_per_node = 1;       // Workers on this node.
  int nnodes = 1;               // Nodes in the job.
  int node_rank = 0;            // This node's index.
  std::string master_addr = "127.0.0.1";  // Node 0's address (MASTER_ADDR and DDP_STORE_ADDR).
  int master_port = 29500;      // MASTER_PORT: a free port on node 0 for the workers' own rendezvous.
  int store_port = 29400;       // DDP_STORE_PORT: the port ddprun's store actually listens on.
  int restart_count = 0;        // 0 for the first start of the group.
  int max_restarts = 0;
  std::string job_token;        // "" when the store needs no token.
  std::string job_id;           // DDP_JOB_ID: this job's name, shared by its nodes ("" for none).
  std::string run_id = "none";  // TORCHELASTIC_RUN_ID (torchrun's --rdzv_id default).
  std::string role = "default";  // ROLE_NAME (torchrun's --role).
  // DDP_STORE_ADDR when the launcher's store is reached at another address than MASTER_ADDR (a c10d
  // rendezvous endpoint); "" for master_addr.
  std::string store_addr;
  // TORCHELASTIC_SIGNALS_TO_HANDLE: the signals the launcher forwards, by name, comma-separated.
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  // Set OMP_NUM_THREADS=1 in every worker: the launcher says so when the variable is unset and more
  // than one worker runs per node (torchrun's rule, printed with torchrun's notice).
  bool default_omp_num_threads = false;
  // Started by Spawn (launch/spawn.h): also set DDP_SPAWN_RANK (= RANK), which makes the program's
  // Spawn call run that rank's function.
  bool spawned = false;
};

// Note [Two ports]: PyTorch's init_process_group("gloo") with env:// makes rank 0 create a TCPStore
// server on MASTER_ADDR:MASTER_PORT. If ddprun's own store listened there, that bind fails (errno 98),
// so ddprun's store lives on --master_port and is named by DDP_STORE_ADDR/DDP_STORE_PORT (which our
// InitProcessGroup prefers), while MASTER_PORT is a free port picked on node 0 for the workers (as
// torchrun's agent does for its workers). Serving PyTorch's TCPStore wire protocol instead would tie
// ddprun to one PyTorch version's private protocol for no gain.

// Returns the variables to set for local worker `local_rank`, those torchrun sets:
//   RANK = ROLE_RANK = node_rank * nproc_per_node + local_rank, WORLD_SIZE = ROLE_WORLD_SIZE =
//   nnodes * nproc_per_node, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (node rank), GROUP_WORLD_SIZE,
//   ROLE_NAME (layout.role), MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,
//   TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID, TORCHELASTIC_USE_AGENT_STORE=False (PyTorch's rank 0
//   hosts its own store: Note [Two ports]), TORCHELASTIC_SIGNALS_TO_HANDLE,
//   TORCH_NCCL_ASYNC_ERROR_HANDLING (the launcher's value, else 1), OMP_NUM_THREADS=1 when
//   layout.default_omp_num_threads (TORCHELASTIC_ERROR_FILE is the worker group's: launch/worker_group.h);
// plus ours: DDP_RESTART_COUNT (restart_count), DDP_STORE_ADDR/DDP_STORE_PORT (ddprun's store),
//   DDP_STORE_IN_LAUNCHER=1 (so rank 0 does not start one), DDP_JOB_ID when job_id is not empty,
//   DDP_JOB_TOKEN when job_token is not empty
//   and DDP_SPAWN_RANK when layout.spawned.
// REQUIRES: 0 <= local_rank < layout.nproc_per_node.
std::map<std::string, std::string> WorkerEnvironment(const JobLayout& layout, int local_rank);

// torchrun's notice, printed once by the launcher when it sets OMP_NUM_THREADS=1.
inline constexpr char kOmpNumThreadsNotice[] =
    "*****************************************\n"
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your "
    "system being overloaded, please further tune the variable for optimal performance in your "
    "application as needed. \n"
    "*****************************************\n";

}  // namespace ddp

#endif  // DDP_LAUNCH_WORKER_ENV_H_
