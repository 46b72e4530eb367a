#include "launch/worker_env.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ddp {

std::map<std::string, std::string> WorkerEnvironment(const JobLayout& layout, int local_rank) {
  DDP_CHECK(local_rank >= 0 && local_rank < layout.nproc_per_node)
      << "local rank " << local_rank << " of " << layout.nproc_per_node;
  const std::string rank = absl::StrCat(layout.node_rank * layout.nproc_per_node + local_rank);
  const std::string world_size = absl::StrCat(layout.nnodes * layout.nproc_per_node);
  std::map<std::string, std::string> env = {
      {"RANK", rank},
      {"ROLE_RANK", rank},
      {"WORLD_SIZE", world_size},
      {"ROLE_WORLD_SIZE", world_size},
      {"ROLE_NAME", "default"},
      {"LOCAL_RANK", absl::StrCat(local_rank)},
      {"LOCAL_WORLD_SIZE", absl::StrCat(layout.nproc_per_node)},
      {"GROUP_RANK", absl::StrCat(layout.node_rank)},
      {"GROUP_WORLD_SIZE", absl::StrCat(layout.nnodes)},
      {"MASTER_ADDR", layout.master_addr},
      {"MASTER_PORT", absl::StrCat(layout.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", absl::StrCat(layout.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", absl::StrCat(layout.max_restarts)},
      {"TORCHELASTIC_RUN_ID", layout.run_id},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"DDP_RESTART_COUNT", absl::StrCat(layout.restart_count)},
      {"DDP_STORE_ADDR", layout.master_addr},
      {"DDP_STORE_PORT", absl::StrCat(layout.store_port)},
      {"DDP_STORE_IN_LAUNCHER", "1"},
  };
  if (layout.default_omp_num_threads) env["OMP_NUM_THREADS"] = "1";
  if (!layout.job_token.empty()) env["DDP_JOB_TOKEN"] = layout.job_token;
  if (layout.spawned) env["DDP_SPAWN_RANK"] = rank;
  return env;
}

}  // namespace ddp
