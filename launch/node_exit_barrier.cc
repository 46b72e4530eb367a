#include "launch/node_exit_barrier.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "launch/job_control.h"
#include "store/tcp_store_client.h"

namespace ddp {
namespace {

constexpr char kCountKey[] = "ddprun/exit_barrier/arrived";
constexpr char kOpenKey[] = "ddprun/exit_barrier/open";

}  // namespace

absl::Status ArriveAtExitBarrier(Store& store, int nnodes) {
  DDP_ASSIGN_OR_RETURN(const int64_t arrived, store.Add(kCountKey, 1));
  if (arrived == nnodes) return store.Set(kOpenKey, "1");
  return absl::OkStatus();
}

absl::Status WaitAtExitBarrier(Store& store, int nnodes, absl::Duration timeout) {
  DDP_RETURN_IF_ERROR(ArriveAtExitBarrier(store, nnodes));
  absl::Status waited = store.Wait({kOpenKey}, timeout);
  if (waited.ok() || !absl::IsDeadlineExceeded(waited)) return waited;
  const absl::StatusOr<int64_t> arrived = store.Add(kCountKey, 0);
  return absl::DeadlineExceededError(absl::StrCat(
      "the exit barrier: ", arrived.ok() ? absl::StrCat(*arrived) : std::string("?"), " of ", nnodes,
      " nodes said their workers were done within ", absl::FormatDuration(timeout)));
}

absl::Status PassExitBarrier(const JobLayout& layout) {
  if (layout.nnodes <= 1) return absl::OkStatus();
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<TcpStoreClient> client,
                       ConnectJobStore(layout, absl::Seconds(5), absl::Seconds(10)));
  if (layout.node_rank != 0) return ArriveAtExitBarrier(*client, layout.nnodes);
  return WaitAtExitBarrier(*client, layout.nnodes, kExitBarrierTimeout);
}

}  // namespace ddp
