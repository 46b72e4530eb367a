#include "comm/process_group_debug.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/async_work.h"
#include "base/check.h"
#include "tensor/dtype.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

// Operation codes in a fingerprint.
enum CallKind : int64_t {
  kAllReduce = 1,
  kBroadcast,
  kAllGather,
  kReduceScatter,
  kReduce,
  kBarrier,
  kGather,
  kScatter,
  kAllToAll,
};
constexpr int64_t kFingerprintLength = 6;  // sequence, kind, reduce op, root, dtype, numel
constexpr int64_t kNoArgument = -1;

const char* KindName(int64_t kind) {
  switch (kind) {
    case kAllReduce: return "AllReduce";
    case kBroadcast: return "Broadcast";
    case kAllGather: return "AllGather";
    case kReduceScatter: return "ReduceScatter";
    case kReduce: return "Reduce";
    case kBarrier: return "Barrier";
    case kGather: return "Gather";
    case kScatter: return "Scatter";
    case kAllToAll: return "AllToAll";
    default: return "an unknown collective";
  }
}

// "#12 AllReduce(sum) of 535820 float32" from a gathered fingerprint.
std::string Describe(const int64_t* f) {
  std::vector<std::string> arguments;
  if (f[2] != kNoArgument) arguments.push_back(ReduceOpName(static_cast<ReduceOp>(f[2])));
  if (f[3] != kNoArgument) arguments.push_back(absl::StrCat("root ", f[3]));
  std::string text = absl::StrCat("#", f[0], " ", KindName(f[1]));
  if (!arguments.empty()) absl::StrAppend(&text, "(", absl::StrJoin(arguments, ", "), ")");
  if (f[1] != kBarrier) absl::StrAppend(&text, " of ", f[5], " ", DTypeName(static_cast<DType>(f[4])));
  return text;
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

absl::Status ProcessGroupDebug::CompareAcrossRanks(int64_t sequence, const Call& call) {
  Tensor mine = FromVector(std::vector<int64_t>{sequence, call.kind, call.reduce_op, call.root, call.dtype, call.numel},
                           {kFingerprintLength});
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
                     Describe(a.data()), ", rank ", second, " calls ", Describe(b.data())));
  }
  return absl::OkStatus();
}

std::shared_ptr<Work> ProcessGroupDebug::Checked(const Call& call,
                                                 const std::function<std::shared_ptr<Work>()>& issue) {
  absl::MutexLock lock(&mu_);
  const int64_t sequence = ++sequence_;
  const absl::Status agreed = CompareAcrossRanks(sequence, call);
  if (!agreed.ok()) return CompletedWork(absl::StrCat(KindName(call.kind), " #", sequence), agreed);
  return issue();
}

std::shared_ptr<Work> ProcessGroupDebug::AllReduce(const Tensor& tensor, ReduceOp op) {
  return Checked({kAllReduce, static_cast<int64_t>(op), kNoArgument, static_cast<int64_t>(tensor.dtype()),
                  tensor.numel()},
                 [&] { return inner_->AllReduce(tensor, op); });
}

std::shared_ptr<Work> ProcessGroupDebug::Broadcast(const Tensor& tensor, int root) {
  return Checked({kBroadcast, kNoArgument, root, static_cast<int64_t>(tensor.dtype()), tensor.numel()},
                 [&] { return inner_->Broadcast(tensor, root); });
}

std::shared_ptr<Work> ProcessGroupDebug::AllGather(const std::vector<Tensor>& outputs, const Tensor& input) {
  return Checked({kAllGather, kNoArgument, kNoArgument, static_cast<int64_t>(input.dtype()), input.numel()},
                 [&] { return inner_->AllGather(outputs, input); });
}

std::shared_ptr<Work> ProcessGroupDebug::ReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                                       ReduceOp op) {
  return Checked({kReduceScatter, static_cast<int64_t>(op), kNoArgument, static_cast<int64_t>(output.dtype()),
                  output.numel()},
                 [&] { return inner_->ReduceScatter(output, inputs, op); });
}

std::shared_ptr<Work> ProcessGroupDebug::Reduce(const Tensor& tensor, int root, ReduceOp op) {
  return Checked({kReduce, static_cast<int64_t>(op), root, static_cast<int64_t>(tensor.dtype()), tensor.numel()},
                 [&] { return inner_->Reduce(tensor, root, op); });
}

std::shared_ptr<Work> ProcessGroupDebug::Barrier() {
  return Checked({kBarrier, kNoArgument, kNoArgument, 0, 0}, [&] { return inner_->Barrier(); });
}

std::shared_ptr<Work> ProcessGroupDebug::Gather(const std::vector<Tensor>& outputs, const Tensor& input, int root) {
  return Checked({kGather, kNoArgument, root, static_cast<int64_t>(input.dtype()), input.numel()},
                 [&] { return inner_->Gather(outputs, input, root); });
}

std::shared_ptr<Work> ProcessGroupDebug::Scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root) {
  return Checked({kScatter, kNoArgument, root, static_cast<int64_t>(output.dtype()), output.numel()},
                 [&] { return inner_->Scatter(output, inputs, root); });
}

std::shared_ptr<Work> ProcessGroupDebug::AllToAll(const std::vector<Tensor>& outputs,
                                                  const std::vector<Tensor>& inputs) {
  DDP_CHECK(!inputs.empty()) << "AllToAll: no inputs";
  return Checked({kAllToAll, kNoArgument, kNoArgument, static_cast<int64_t>(inputs[0].dtype()), inputs[0].numel()},
                 [&] { return inner_->AllToAll(outputs, inputs); });
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
