#include "launch/elastic_launch.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "launch/job_control.h"
#include "store/prefix_store.h"
#include "store/store_keys.h"
#include "store/tcp_store_client.h"

namespace ddp {

absl::Status ValidateElasticLaunchOptions(const ElasticLaunchOptions& options, int world_size) {
  if (!options.enabled && options.min_world_size != 1) {
    return absl::InvalidArgumentError("--min_world_size needs --elastic (without it a lost worker stops the job)");
  }
  if (options.min_world_size < 1 || options.min_world_size > world_size) {
    return absl::InvalidArgumentError(absl::StrCat("--min_world_size must be in [1, ", world_size,
                                                   "] (the job's world size), got ", options.min_world_size));
  }
  return absl::OkStatus();
}

std::map<std::string, std::string> ElasticWorkerVariables(const ElasticLaunchOptions& options) {
  if (!options.enabled) return {};
  return {{"DDP_ELASTIC", "1"}, {"DDP_ELASTIC_MIN_WORLD_SIZE", absl::StrCat(options.min_world_size)}};
}

void RecordElasticLoss(const JobLayout& layout, int restart, int rank) {
  absl::StatusOr<std::unique_ptr<TcpStoreClient>> client = ConnectJobStore(layout);
  if (!client.ok()) return;
  PrefixStore group_store(DefaultGroupStorePrefix(absl::StrCat(restart)), client->get());
  (void)group_store.Add(ElasticLostKey(rank), 1);
}

}  // namespace ddp
