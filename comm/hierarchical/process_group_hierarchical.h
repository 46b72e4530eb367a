// ProcessGroupHierarchical: all-reduce for groups that span several hosts with several ranks on each,
// over shared memory inside a host and Gloo between hosts. --backend=auto chooses it (comm/init.h).
//
// Note [Hierarchical all-reduce]
//   Ranks are grouped by host (the host identities exchanged through the store, comm/host_identity.h);
//   every host must run the same number L of ranks. Three inner groups are built:
//     local: the L ranks of this host, over shared memory (ProcessGroupShm);
//     cross: the ranks with this rank's local index on every host (one per host), over Gloo;
//     flat:  every rank, over Gloo, for everything that is not an all-reduce.
//   An all-reduce of n elements (padded to a multiple of L when it must be):
//     1. reduce-scatter inside the host: local rank i holds the host's reduction of slice i (n/L);
//     2. all-reduce of slice i across hosts (cross group i): only n/L elements per rank cross the
//        network, and the L cross groups of a host run at once;
//     3. all-gather inside the host: every rank gets every slice.
//   For the average, stages use the sum and the result is divided by the world size at the end, as Gloo
//   does. Dtypes the shared-memory backend does not take go through the flat group whole.
//   Every collective runs on this group's one worker thread, which issues the inner calls and waits on
//   each (bounded by the group's timeout), so works complete in issue order whatever inner group they
//   use. An inner failure fails the work with the stage that failed and the inner group's error (which
//   names the lost rank in that group's numbering, with the global ranks of the group in the message),
//   and breaks this group (Note [Broken groups] in comm/queued_process_group.cc).
#ifndef DDP_COMM_HIERARCHICAL_PROCESS_GROUP_HIERARCHICAL_H_
#define DDP_COMM_HIERARCHICAL_PROCESS_GROUP_HIERARCHICAL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/queued_process_group.h"
#include "store/store.h"

namespace ddp {

// Where one rank sits among the hosts of a group.
struct HostLayout {
  int host_count = 1;
  int host_index = 0;                    // hosts are numbered in order of their lowest rank
  int local_size = 1;                    // ranks per host (the same on every host)
  int local_rank = 0;                    // position of this rank among its host's ranks (rank order)
  std::vector<int> local_ranks;          // the global ranks of this rank's host, in local order
  std::vector<int> cross_ranks;          // the global ranks with this local_rank, in host order
};

// The layout of `rank` from every rank's host identity (rank order). Errors (kFailedPrecondition) name
// hosts whose rank counts differ. Pure. REQUIRES: 0 <= rank < identities.size().
absl::StatusOr<HostLayout> ComputeHostLayout(const std::vector<std::string>& identities, int rank);

// Builds an inner group of `size` ranks in which this process is `rank`, rendezvousing through `store`
// (a prefix of the parent's store, owned by the hierarchical group and alive as long as the inner group).
using InnerGroupFactory =
    std::function<absl::StatusOr<std::unique_ptr<ProcessGroup>>(Store& store, int rank, int size)>;

class ProcessGroupHierarchical : public QueuedProcessGroup {
 public:
  // Builds the local (shm_factory), cross and flat (gloo_factory) groups of Note [Hierarchical
  // all-reduce] for `rank` of `size`, under store prefixes "hier/..." of `store` (which must outlive the
  // group). Collective over the whole group. Errors come from the layout or an inner group's rendezvous.
  static absl::StatusOr<std::unique_ptr<ProcessGroupHierarchical>> Create(
      Store& store, int rank, int size, const std::vector<std::string>& host_identities,
      absl::Duration timeout, const InnerGroupFactory& shm_factory, const InnerGroupFactory& gloo_factory);
  // Queued works complete with kCancelled; the running one finishes first (bounded by timeout()).
  ~ProcessGroupHierarchical() override;

  const HostLayout& layout() const { return layout_; }

  // The collectives are QueuedProcessGroup's: AllReduce follows Note [Hierarchical all-reduce]
  // (REQUIRES: contiguous CPU tensor); the rest run on the flat Gloo group, in this group's issue order.
  // Point to point and the monitored barrier go straight to the flat group (they take no part in the
  // issue order: a Send completes only once the peer posted its Recv, so queueing it could deadlock).
  std::shared_ptr<Work> Send(const Tensor& tensor, int dst, int tag = 0) override;
  std::shared_ptr<Work> Recv(const Tensor& tensor, int src, int tag = 0) override;
  absl::Status MonitoredBarrier(absl::Duration timeout, bool wait_all_ranks = false) override;

 private:
  ProcessGroupHierarchical(int rank, int size, absl::Duration timeout, HostLayout layout);

  // AllReduce takes contiguous CPU tensors; the flat group checks the tensors of the other calls.
  void CheckTensor(CollectiveKind kind, const Tensor& t) const override;
  std::shared_ptr<Work> IssueAllReduce(const CollectiveSpec& spec, const Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> IssueBroadcast(const CollectiveSpec& spec, const Tensor& tensor, int root) override;
  std::shared_ptr<Work> IssueAllGather(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                       const Tensor& input) override;
  std::shared_ptr<Work> IssueReduceScatter(const CollectiveSpec& spec, const Tensor& output,
                                           const std::vector<Tensor>& inputs, ReduceOp op) override;
  std::shared_ptr<Work> IssueReduce(const CollectiveSpec& spec, const Tensor& tensor, int root, ReduceOp op) override;
  std::shared_ptr<Work> IssueBarrier(const CollectiveSpec& spec) override;
  std::shared_ptr<Work> IssueGather(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                    const Tensor& input, int root) override;
  std::shared_ptr<Work> IssueScatter(const CollectiveSpec& spec, const Tensor& output,
                                     const std::vector<Tensor>& inputs, int root) override;
  std::shared_ptr<Work> IssueAllToAll(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                      const std::vector<Tensor>& inputs) override;

  // Queues the call `spec` that waits on one inner Work, which `issue` starts on the flat group; errors
  // name `stage`.
  std::shared_ptr<Work> IssueOnFlat(const CollectiveSpec& spec, const char* stage,
                                    std::function<std::shared_ptr<Work>()> issue);
  // Waits for an inner work (bounded by timeout()); errors read "<call> failed: <stage>: <inner error>".
  absl::Status Await(const std::shared_ptr<Work>& work, const std::string& stage, const RunningCall& call) const;
  absl::Status RunAllReduce(const Tensor& tensor, ReduceOp op, const RunningCall& call);
  // A flat scratch tensor of `numel` elements of `dtype` for the running task: a view of a buffer kept
  // across calls (`which`: 0 the slice, 1 the padded copy) and grown when too small, so a training loop's
  // all-reduces do not allocate (and first-touch fresh pages) on every call. Worker thread only.
  Tensor Scratch(int which, int64_t numel, DType dtype);

  const HostLayout layout_;
  // Prefix stores before the groups that use them (destroyed after them).
  std::vector<std::unique_ptr<Store>> stores_;
  std::unique_ptr<ProcessGroup> local_;
  std::unique_ptr<ProcessGroup> cross_;
  std::unique_ptr<ProcessGroup> flat_;
  Tensor scratch_[2];  // Scratch's buffers, used by the worker thread only
};

}  // namespace ddp

#endif  // DDP_COMM_HIERARCHICAL_PROCESS_GROUP_HIERARCHICAL_H_
