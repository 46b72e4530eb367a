#include "comm/process_group_debug.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "comm/async_work.h"
#include "base/check.h"
#include "tensor/dtype.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

constexpr int64_t kFingerprintLength = 6;  // sequence, kind, reduce op, root, dtype, numel

// A call's fingerprint: every field of its CollectiveSpec the ranks must agree on.
std::vector<int64_t> Fingerprint(int64_t sequence, const CollectiveSpec& call) {
  return {sequence, static_cast<int64_t>(call.kind), static_cast<int64_t>(call.op), call.root,
          static_cast<int64_t>(call.dtype), call.numel};
}

// "#12 AllReduce(sum) of 535820 float32" from a gathered fingerprint.
std::string Describe(const std::vector<int64_t>& f) {
  CollectiveSpec call;
  call.kind = static_cast<CollectiveKind>(f[1]);
  call.op = static_cast<ReduceOp>(f[2]);
  call.root = static_cast<int>(f[3]);
  call.dtype = static_cast<DType>(f[4]);
  call.numel = f[5];
  return absl::StrCat("#", f[0], " ", call.Signature());
}

std::shared_ptr<Work> CompletedWork(const std::string& description, absl::Status status) {
  auto work = std::make_shared<AsyncWork>(description);
  work->MarkStarted();
  work->Complete(std::move(status));
  return work;
}

}  // namespace

absl::StatusOr<DebugMode> ParseDebugMode(const char* value) {
  const std::string mode = absl::AsciiStrToLower(value == nullptr ? "" : value);
  if (mode.empty() || mode == "off") return DebugMode::kOff;
  if (mode == "detail") return DebugMode::kDetail;
  return absl::InvalidArgumentError(
      absl::StrCat("DDP_DEBUG=", value, " is not a debug mode: use off or detail"));
}

ProcessGroupDebug::ProcessGroupDebug(std::unique_ptr<ProcessGroup> inner)
    : owned_(std::move(inner)), inner_(owned_.get()) {
  DDP_CHECK(inner_ != nullptr) << "ProcessGroupDebug needs a group to wrap";
}

ProcessGroupDebug::ProcessGroupDebug(ProcessGroup* inner) : inner_(inner) {
  DDP_CHECK(inner_ != nullptr) << "ProcessGroupDebug needs a group to wrap";
}

absl::Status ProcessGroupDebug::CompareAcrossRanks(int64_t sequence, const CollectiveSpec& call) {
  Tensor mine = FromVector(Fingerprint(sequence, call), {kFingerprintLength});
  const Device device = inner_->tensor_device();
  std::vector<Tensor> gathered;
  for (int r = 0; r < size(); ++r) gathered.push_back(Tensor::Empty({kFingerprintLength}, DType::kInt64, device));
  const absl::Status status =
      inner_->AllGather(gathered, device.is_cpu() ? mine : ToDevice(mine, device))->Wait(timeout());
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("DDP_DEBUG=detail: comparing call #", sequence,
                                                    " across ranks failed: ", status.message()));
  }
  const std::vector<int64_t> ours = mine.ToVector<int64_t>();
  for (int r = 0; r < size(); ++r) {
    const std::vector<int64_t> theirs = ToDevice(gathered[r], Device::CPU()).ToVector<int64_t>();
    if (theirs == ours) continue;
    const int first = std::min(rank(), r), second = std::max(rank(), r);
    const std::vector<int64_t>& a = first == rank() ? ours : theirs;
    const std::vector<int64_t>& b = first == rank() ? theirs : ours;
    return absl::FailedPreconditionError(
        absl::StrCat("DDP_DEBUG=detail: collective mismatch at call #", sequence, ": rank ", first, " calls ",
                     Describe(a), ", rank ", second, " calls ", Describe(b)));
  }
  return absl::OkStatus();
}

std::shared_ptr<Work> ProcessGroupDebug::Checked(const CollectiveSpec& call,
                                                 const std::function<std::shared_ptr<Work>()>& issue) {
  absl::MutexLock lock(&mu_);
  const int64_t sequence = ++sequence_;
  const absl::Status agreed = CompareAcrossRanks(sequence, call);
  if (!agreed.ok()) return CompletedWork(DescribeCall(call, sequence, rank(), size(), backend_name()), agreed);
  return issue();
}

std::shared_ptr<Work> ProcessGroupDebug::AllReduce(const Tensor& tensor, ReduceOp op) {
  return Checked(CollectiveSpec::AllReduce(tensor, op), [&] { return inner_->AllReduce(tensor, op); });
}

std::shared_ptr<Work> ProcessGroupDebug::Broadcast(const Tensor& tensor, int root) {
  return Checked(CollectiveSpec::Broadcast(tensor, root), [&] { return inner_->Broadcast(tensor, root); });
}

std::shared_ptr<Work> ProcessGroupDebug::AllGather(const std::vector<Tensor>& outputs, const Tensor& input) {
  return Checked(CollectiveSpec::AllGather(input), [&] { return inner_->AllGather(outputs, input); });
}

std::shared_ptr<Work> ProcessGroupDebug::ReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                                       ReduceOp op) {
  return Checked(CollectiveSpec::ReduceScatter(output, op), [&] { return inner_->ReduceScatter(output, inputs, op); });
}

std::shared_ptr<Work> ProcessGroupDebug::Reduce(const Tensor& tensor, int root, ReduceOp op) {
  return Checked(CollectiveSpec::Reduce(tensor, root, op), [&] { return inner_->Reduce(tensor, root, op); });
}

std::shared_ptr<Work> ProcessGroupDebug::Barrier() {
  return Checked(CollectiveSpec::Barrier(), [&] { return inner_->Barrier(); });
}

std::shared_ptr<Work> ProcessGroupDebug::Gather(const std::vector<Tensor>& outputs, const Tensor& input, int root) {
  return Checked(CollectiveSpec::Gather(input, root), [&] { return inner_->Gather(outputs, input, root); });
}

std::shared_ptr<Work> ProcessGroupDebug::Scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root) {
  return Checked(CollectiveSpec::Scatter(output, root), [&] { return inner_->Scatter(output, inputs, root); });
}

std::shared_ptr<Work> ProcessGroupDebug::AllToAll(const std::vector<Tensor>& outputs,
                                                  const std::vector<Tensor>& inputs) {
  DDP_CHECK(!inputs.empty()) << "AllToAll: no inputs";
  return Checked(CollectiveSpec::AllToAll(inputs[0]), [&] { return inner_->AllToAll(outputs, inputs); });
}

std::shared_ptr<Work> ProcessGroupDebug::Send(const Tensor& tensor, int dst, int tag) {
  return inner_->Send(tensor, dst, tag);
}

std::shared_ptr<Work> ProcessGroupDebug::Recv(const Tensor& tensor, int src, int tag) {
  return inner_->Recv(tensor, src, tag);
}

absl::Status ProcessGroupDebug::MonitoredBarrier(absl::Duration timeout, bool wait_all_ranks) {
  return inner_->MonitoredBarrier(timeout, wait_all_ranks);
}

}  // namespace ddp
