#include "launch/worker_env.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "store/launch_env.h"

namespace ddp {

std::map<std::string, std::string> WorkerEnvironment(const JobLayout& layout, int local_rank) {
  DDP_CHECK(local_rank >= 0 && local_rank < layout.nproc_per_node)
      << "local rank " << local_rank << " of " << layout.nproc_per_node;
  LaunchEnv launch;  // Note [The launch environment]
  launch.rank = layout.node_rank * layout.nproc_per_node + local_rank;
  launch.world_size = layout.nnodes * layout.nproc_per_node;
  launch.local_rank = local_rank;
  launch.local_world_size = layout.nproc_per_node;
  launch.master_addr = layout.master_addr;
  launch.store_addr = layout.store_addr.empty() ? layout.master_addr : layout.store_addr;
  launch.master_port = layout.master_port;
  launch.store_port = layout.store_port;
  launch.restart_count = layout.restart_count;
  launch.store_in_launcher = true;
  launch.job_id = layout.job_id;
  std::map<std::string, std::string> env = LaunchEnvVariables(launch);
  const std::string rank = env["RANK"];
  // torchrun's own variables beyond the contract.
  env["ROLE_RANK"] = rank;
  env["ROLE_WORLD_SIZE"] = env["WORLD_SIZE"];
  env["ROLE_NAME"] = layout.role;
  env["GROUP_RANK"] = absl::StrCat(layout.node_rank);
  env["GROUP_WORLD_SIZE"] = absl::StrCat(layout.nnodes);
  env["TORCHELASTIC_MAX_RESTARTS"] = absl::StrCat(layout.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = layout.run_id;
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = layout.signals_to_handle;
  const char* nccl_async = std::getenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");
  env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = nccl_async != nullptr ? nccl_async : "1";
  if (layout.default_omp_num_threads) env["OMP_NUM_THREADS"] = "1";
  if (!layout.job_token.empty()) env["DDP_JOB_TOKEN"] = layout.job_token;
  if (layout.spawned) env["DDP_SPAWN_RANK"] = rank;
  return env;
}

}  // namespace ddp
