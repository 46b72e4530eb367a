#include "comm/hierarchical/process_group_hierarchical.h"

#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "store/prefix_store.h"
#include "comm/reduce_functions.h"
#include "base/check.h"

namespace ddp {

absl::StatusOr<HostLayout> ComputeHostLayout(const std::vector<std::string>& identities, int rank) {
  DDP_CHECK(rank >= 0 && rank < static_cast<int>(identities.size()))
      << "ComputeHostLayout: rank " << rank << " of " << identities.size();
  std::vector<std::vector<int>> hosts;  // global ranks per host, hosts in order of their lowest rank
  std::map<std::string, size_t> host_of;
  for (int r = 0; r < static_cast<int>(identities.size()); ++r) {
    auto [it, inserted] = host_of.emplace(identities[r], hosts.size());
    if (inserted) hosts.emplace_back();
    hosts[it->second].push_back(r);
  }
  for (size_t h = 1; h < hosts.size(); ++h) {
    if (hosts[h].size() != hosts[0].size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "hierarchical all-reduce needs the same number of ranks on every host: host 0 (\"", identities[0],
          "\", ranks ", absl::StrJoin(hosts[0], ","), ") has ", hosts[0].size(), " but host ", h, " (\"",
          identities[hosts[h][0]], "\", ranks ", absl::StrJoin(hosts[h], ","), ") has ", hosts[h].size()));
    }
  }
  HostLayout layout;
  layout.host_count = static_cast<int>(hosts.size());
  layout.host_index = static_cast<int>(host_of.at(identities[rank]));
  layout.local_ranks = hosts[layout.host_index];
  layout.local_size = static_cast<int>(layout.local_ranks.size());
  for (int i = 0; i < layout.local_size; ++i) {
    if (layout.local_ranks[i] == rank) layout.local_rank = i;
  }
  for (const std::vector<int>& host : hosts) layout.cross_ranks.push_back(host[layout.local_rank]);
  return layout;
}

namespace {

// What the queued skeleton needs: the name and the bound on every collective.
QueuedProcessGroupOptions QueuedGroupOptions(absl::Duration timeout) {
  QueuedProcessGroupOptions queued;
  queued.backend = "hier(shm+gloo)";
  queued.timeout = timeout;
  return queued;
}

}  // namespace

ProcessGroupHierarchical::ProcessGroupHierarchical(int rank, int size, absl::Duration timeout, HostLayout layout)
    : QueuedProcessGroup(rank, size, QueuedGroupOptions(timeout)), layout_(std::move(layout)) {}

absl::StatusOr<std::unique_ptr<ProcessGroupHierarchical>> ProcessGroupHierarchical::Create(
    Store& store, int rank, int size, const std::vector<std::string>& host_identities, absl::Duration timeout,
    const InnerGroupFactory& shm_factory, const InnerGroupFactory& gloo_factory) {
  DDP_CHECK(static_cast<int>(host_identities.size()) == size)
      << "ProcessGroupHierarchical: " << host_identities.size() << " host identities for " << size << " ranks";
  DDP_ASSIGN_OR_RETURN(HostLayout layout, ComputeHostLayout(host_identities, rank));
  std::unique_ptr<ProcessGroupHierarchical> group(new ProcessGroupHierarchical(rank, size, timeout, layout));
  auto prefixed = [&](std::string prefix) -> Store& {
    group->stores_.push_back(std::make_unique<PrefixStore>(std::move(prefix), &store));
    return *group->stores_.back();
  };
  const auto annotate = [&](const absl::Status& status, const std::string& which,
                            const std::vector<int>& ranks) {
    return absl::Status(status.code(), absl::StrCat("hierarchical group: creating the ", which,
                                                    " group (global ranks ", absl::StrJoin(ranks, ","),
                                                    "): ", status.message()));
  };
  auto local = shm_factory(prefixed(absl::StrCat("hier/local/", layout.host_index)), layout.local_rank,
                           layout.local_size);
  if (!local.ok()) return annotate(local.status(), "shared-memory", layout.local_ranks);
  group->local_ = *std::move(local);
  auto cross = gloo_factory(prefixed(absl::StrCat("hier/cross/", layout.local_rank)), layout.host_index,
                            layout.host_count);
  if (!cross.ok()) return annotate(cross.status(), "cross-host", layout.cross_ranks);
  group->cross_ = *std::move(cross);
  std::vector<int> everyone(size);
  for (int r = 0; r < size; ++r) everyone[r] = r;
  auto flat = gloo_factory(prefixed("hier/flat"), rank, size);
  if (!flat.ok()) return annotate(flat.status(), "flat", everyone);
  group->flat_ = *std::move(flat);
  return group;
}

ProcessGroupHierarchical::~ProcessGroupHierarchical() {
  StopQueue();  // before the inner groups its running task may be waiting on
}

void ProcessGroupHierarchical::CheckTensor(CollectiveKind kind, const Tensor& t) const {
  if (kind == CollectiveKind::kAllReduce) QueuedProcessGroup::CheckTensor(kind, t);
}

absl::Status ProcessGroupHierarchical::Await(const std::shared_ptr<Work>& work, const std::string& stage,
                                             const RunningCall& call) const {
  absl::Status status = work->Wait(timeout());
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(call(), ": ", stage, ": ", status.message()));
}

namespace {

// The dtypes ProcessGroupShm reduces (process_group_shm.h); others take the flat group.
bool SharedMemoryReduces(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kInt64 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

// `count` contiguous pieces of `chunk` elements of the flat contiguous `tensor`.
std::vector<Tensor> Pieces(const Tensor& tensor, int count, int64_t chunk) {
  std::vector<Tensor> pieces;
  for (int i = 0; i < count; ++i) {
    pieces.push_back(Tensor::View(tensor.storage(), {chunk}, {1}, tensor.storage_offset() + i * chunk,
                                  tensor.dtype()));
  }
  return pieces;
}

}  // namespace

Tensor ProcessGroupHierarchical::Scratch(int which, int64_t numel, DType dtype) {
  Tensor& buffer = scratch_[which];
  const size_t bytes = static_cast<size_t>(numel) * ElementSize(dtype);
  if (!buffer.defined() || buffer.nbytes() < bytes) {
    buffer = Tensor::Empty({static_cast<int64_t>((bytes + 7) / 8)}, DType::kInt64);  // 8-byte aligned
  }
  return Tensor::View(buffer.storage(), {numel}, {1}, 0, dtype);
}

absl::Status ProcessGroupHierarchical::RunAllReduce(const Tensor& tensor, ReduceOp op, const RunningCall& call) {
  const int64_t n = tensor.numel();
  if (n == 0) return absl::OkStatus();
  if (!SharedMemoryReduces(tensor.dtype())) return Await(flat_->AllReduce(tensor, op), "all-reduce (flat gloo)", call);
  const ReduceOp stage_op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  const int local = layout_.local_size;
  const int64_t chunk = (n + local - 1) / local;
  const bool in_place = chunk * local == n;
  Tensor padded = tensor;
  if (!in_place) {  // the tail of the last piece is padding: reduced and gathered, never read
    padded = Scratch(1, chunk * local, tensor.dtype());
    std::memcpy(padded.raw_data(), tensor.raw_data(), tensor.nbytes());
    std::memset(static_cast<char*>(padded.raw_data()) + tensor.nbytes(), 0, padded.nbytes() - tensor.nbytes());
  }
  const std::vector<Tensor> pieces = Pieces(padded, local, chunk);
  const Tensor slice = Scratch(0, chunk, tensor.dtype());
  DDP_RETURN_IF_ERROR(
      Await(local_->ReduceScatter(slice, pieces, stage_op), "reduce-scatter inside the host (shm)", call));
  DDP_RETURN_IF_ERROR(Await(cross_->AllReduce(slice, stage_op),
                            absl::StrCat("all-reduce across hosts (gloo, global ranks ",
                                         absl::StrJoin(layout_.cross_ranks, ","), ")"),
                            call));
  DDP_RETURN_IF_ERROR(Await(local_->AllGather(pieces, slice), "all-gather inside the host (shm)", call));
  if (!in_place) std::memcpy(tensor.raw_data(), padded.raw_data(), tensor.nbytes());
  if (op == ReduceOp::kAvg) DivideInPlace(tensor.raw_data(), tensor.dtype(), static_cast<size_t>(n), size());
  return absl::OkStatus();
}

std::shared_ptr<Work> ProcessGroupHierarchical::IssueAllReduce(const CollectiveSpec& spec, const Tensor& tensor,
                                                               ReduceOp op) {
  return Issue(spec, [this, tensor, op](const RunningCall& call) { return RunAllReduce(tensor, op, call); });
}

std::shared_ptr<Work> ProcessGroupHierarchical::IssueOnFlat(const CollectiveSpec& spec, const char* stage,
                                                            std::function<std::shared_ptr<Work>()> issue) {
  return Issue(spec, [this, stage, issue = std::move(issue)](const RunningCall& call) {
    return Await(issue(), stage, call);
  });
}

std::shared_ptr<Work> ProcessGroupHierarchical::IssueBroadcast(const CollectiveSpec& spec, const Tensor& tensor,
                                                               int root) {
  return IssueOnFlat(spec, "broadcast (flat gloo)", [this, tensor, root] { return flat_->Broadcast(tensor, root); });
}

std::shared_ptr<Work> ProcessGroupHierarchical::IssueAllGather(const CollectiveSpec& spec,
                                                               const std::vector<Tensor>& outputs,
                                                               const Tensor& input) {
  return IssueOnFlat(spec, "all-gather (flat gloo)",
                     [this, outputs, input] { return flat_->AllGather(outputs, input); });
}

std::shared_ptr<Work> ProcessGroupHierarchical::IssueReduceScatter(const CollectiveSpec& spec, const Tensor& output,
                                                                   const std::vector<Tensor>& inputs, ReduceOp op) {
  return IssueOnFlat(spec, "reduce-scatter (flat gloo)",
                     [this, output, inputs, op] { return flat_->ReduceScatter(output, inputs, op); });
}

std::shared_ptr<Work> ProcessGroupHierarchical::IssueReduce(const CollectiveSpec& spec, const Tensor& tensor, int root,
                                                            ReduceOp op) {
  return IssueOnFlat(spec, "reduce (flat gloo)",
                     [this, tensor, root, op] { return flat_->Reduce(tensor, root, op); });
}

std::shared_ptr<Work> ProcessGroupHierarchical::IssueBarrier(const CollectiveSpec& spec) {
  return IssueOnFlat(spec, "barrier (flat gloo)", [this] { return flat_->Barrier(); });
}

std::shared_ptr<Work> ProcessGroupHierarchical::IssueGather(const CollectiveSpec& spec,
                                                            const std::vector<Tensor>& outputs, const Tensor& input,
                                                            int root) {
  return IssueOnFlat(spec, "gather (flat gloo)",
                     [this, outputs, input, root] { return flat_->Gather(outputs, input, root); });
}

std::shared_ptr<Work> ProcessGroupHierarchical::IssueScatter(const CollectiveSpec& spec, const Tensor& output,
                                                             const std::vector<Tensor>& inputs, int root) {
  return IssueOnFlat(spec, "scatter (flat gloo)",
                     [this, output, inputs, root] { return flat_->Scatter(output, inputs, root); });
}

std::shared_ptr<Work> ProcessGroupHierarchical::IssueAllToAll(const CollectiveSpec& spec,
                                                              const std::vector<Tensor>& outputs,
                                                              const std::vector<Tensor>& inputs) {
  return IssueOnFlat(spec, "all-to-all (flat gloo)",
                     [this, outputs, inputs] { return flat_->AllToAll(outputs, inputs); });
}

std::shared_ptr<Work> ProcessGroupHierarchical::Send(const Tensor& tensor, int dst, int tag) {
  return flat_->Send(tensor, dst, tag);
}

std::shared_ptr<Work> ProcessGroupHierarchical::Recv(const Tensor& tensor, int src, int tag) {
  return flat_->Recv(tensor, src, tag);
}

absl::Status ProcessGroupHierarchical::MonitoredBarrier(absl::Duration timeout, bool wait_all_ranks) {
  return flat_->MonitoredBarrier(timeout, wait_all_ranks);
}

}  // namespace ddp
