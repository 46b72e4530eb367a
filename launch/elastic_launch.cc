#include "launch/elastic_launch.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/check.h"
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

namespace {

// The job store's namespace of attempt `restart`, through a fresh connection (null when unreachable).
struct AttemptStore {
  std::unique_ptr<TcpStoreClient> client;
  std::unique_ptr<PrefixStore> store;
};

AttemptStore ConnectAttempt(const JobLayout& layout, int restart) {
  AttemptStore attempt;
  absl::StatusOr<std::unique_ptr<TcpStoreClient>> client = ConnectJobStore(layout);
  if (!client.ok()) return attempt;
  attempt.client = std::move(*client);
  attempt.store = std::make_unique<PrefixStore>(DefaultGroupStorePrefix(absl::StrCat(restart)), attempt.client.get());
  return attempt;
}

}  // namespace

bool ElasticJobClosed(const JobLayout& layout, int restart) {
  AttemptStore attempt = ConnectAttempt(layout, restart);
  if (attempt.store == nullptr) return true;
  absl::StatusOr<int64_t> closed = attempt.store->Add(ElasticClosedKey(), 0);
  return !closed.ok() || *closed > 0;
}

void CloseElasticJob(const JobLayout& layout, int restart) {
  AttemptStore attempt = ConnectAttempt(layout, restart);
  if (attempt.store != nullptr) (void)attempt.store->Add(ElasticClosedKey(), 1);
}

absl::StatusOr<int> AllocateReplacementMember(const JobLayout& layout, int restart) {
  AttemptStore attempt = ConnectAttempt(layout, restart);
  if (attempt.store == nullptr) return absl::UnavailableError("cannot reach the job's store to number a replacement");
  DDP_ASSIGN_OR_RETURN(const int64_t n, attempt.store->Add(ElasticReplacementsKey(), 1));
  return layout.nnodes * layout.nproc_per_node + static_cast<int>(n) - 1;
}

std::map<std::string, std::string> ReplacementVariables(int member) {
  return {{"DDP_ELASTIC_JOIN", "1"}, {"DDP_ELASTIC_MEMBER", absl::StrCat(member)}};
}

bool MayReplace(const ElasticLaunchOptions& options, int replacements_left, int alive) {
  return options.enabled && replacements_left > 0 && alive >= std::max(1, options.min_world_size);
}

}  // namespace ddp
