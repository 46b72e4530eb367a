// The environment ddprun gives each worker (torchrun's variables plus ours). Pure functions.
#ifndef DDP_LAUNCH_WORKER_ENV_H_
#define DDP_LAUNCH_WORKER_ENV_H_

#include <map>
#include <string>

namespace ddp {

// What the launcher knows about the job when it starts a local worker group.
struct JobLayout {
  int nproc_per_node = 1;       // Workers on this node.
  int nnodes = 1;               // Nodes in the job.
  int node_rank = 0;            // This node's index.
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;      // The port the store actually listens on.
  int restart_count = 0;        // 0 for the first start of the group.
  int max_restarts = 0;
  std::string job_token;        // "" when the store needs no token.
};

// Returns the variables to set for local worker `local_rank`:
//   RANK = node_rank * nproc_per_node + local_rank, WORLD_SIZE = nnodes * nproc_per_node,
//   LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (node rank), GROUP_WORLD_SIZE, MASTER_ADDR,
//   MASTER_PORT, TORCHELASTIC_RESTART_COUNT and DDP_RESTART_COUNT (restart_count),
//   TORCHELASTIC_MAX_RESTARTS, DDP_STORE_IN_LAUNCHER=1 (the store runs in node 0's ddprun, so rank 0
//   must not start its own), and DDP_JOB_TOKEN when job_token is not empty.
// REQUIRES: 0 <= local_rank < layout.nproc_per_node.
std::map<std::string, std::string> WorkerEnvironment(const JobLayout& layout, int local_rank);

}  // namespace ddp

#endif  // DDP_LAUNCH_WORKER_ENV_H_
