#include "launch/worker_env.h"

#include "absl/strings/str_cat.h"
#include "tensor/check.h"

namespace ddp {

std::map<std::string, std::string> WorkerEnvironment(const JobLayout& layout, int local_rank) {
  DDP_CHECK(local_rank >= 0 && local_rank < layout.nproc_per_node)
      << "local rank " << local_rank << " of " << layout.nproc_per_node;
  std::map<std::string, std::string> env = {
      {"RANK", absl::StrCat(layout.node_rank * layout.nproc_per_node + local_rank)},
      {"WORLD_SIZE", absl::StrCat(layout.nnodes * layout.nproc_per_node)},
      {"LOCAL_RANK", absl::StrCat(local_rank)},
      {"LOCAL_WORLD_SIZE", absl::StrCat(layout.nproc_per_node)},
      {"GROUP_RANK", absl::StrCat(layout.node_rank)},
      {"GROUP_WORLD_SIZE", absl::StrCat(layout.nnodes)},
      {"MASTER_ADDR", layout.master_addr},
      {"MASTER_PORT", absl::StrCat(layout.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", absl::StrCat(layout.restart_count)},
      {"DDP_RESTART_COUNT", absl::StrCat(layout.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", absl::StrCat(layout.max_restarts)},
      {"DDP_STORE_IN_LAUNCHER", "1"},
  };
  if (!layout.job_token.empty()) env["DDP_JOB_TOKEN"] = layout.job_token;
  return env;
}

}  // namespace ddp
