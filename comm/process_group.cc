#include "comm/process_group.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "comm/async_work.h"
#include "comm/collective_description.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

// Bytes travel as int64 elements (8 bytes each), zero-padded.
Tensor PackBytes(const std::string& bytes, int64_t capacity) {
  Tensor t = Tensor::Empty({(capacity + 7) / 8}, DType::kInt64);
  std::memset(t.raw_data(), 0, t.nbytes());
  std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

// `host` on `device` (the same tensor when `device` is the CPU).
Tensor Staged(const Tensor& host, Device device) { return device.is_cpu() ? host : ToDevice(host, device); }

// Copies a staged tensor's result back into `host` (nothing when it was not staged).
void Unstage(const Tensor& staged, const Tensor& host) {
  if (!(staged.device() == host.device())) CopyInPlace(host, staged);
}

}  // namespace

absl::Status ProcessGroup::AllReduceHost(const Tensor& host, ReduceOp op) {
  DDP_CHECK(host.device().is_cpu() && host.is_contiguous()) << "AllReduceHost takes a contiguous CPU tensor";
  Tensor staged = Staged(host, tensor_device());
  DDP_RETURN_IF_ERROR(AllReduce(staged, op)->Wait(timeout()));
  Unstage(staged, host);
  return absl::OkStatus();
}

std::string ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "unknown";
}

absl::Status ProcessGroup::BroadcastObject(std::string* data, int root) {
  const Device device = tensor_device();
  Tensor length = Tensor::Empty({1}, DType::kInt64);
  *length.data<int64_t>() = static_cast<int64_t>(data->size());
  Tensor staged_length = Staged(length, device);
  DDP_RETURN_IF_ERROR(Broadcast(staged_length, root)->Wait(timeout()));
  Unstage(staged_length, length);
  const int64_t n = *length.data<int64_t>();
  if (n < 0) return absl::DataLossError(absl::StrCat("BroadcastObject: bad length ", n, " from rank ", root));
  Tensor payload = PackBytes(rank() == root ? *data : std::string(), n);
  Tensor staged_payload = Staged(payload, device);
  DDP_RETURN_IF_ERROR(Broadcast(staged_payload, root)->Wait(timeout()));
  Unstage(staged_payload, payload);
  data->assign(static_cast<const char*>(payload.raw_data()), n);
  return absl::OkStatus();
}

absl::Status ProcessGroup::AllGatherObject(const std::string& input, std::vector<std::string>* outputs) {
  const int n = size();
  const Device device = tensor_device();
  Tensor my_length = Tensor::Empty({1}, DType::kInt64);
  *my_length.data<int64_t>() = static_cast<int64_t>(input.size());
  std::vector<Tensor> lengths, staged_lengths;
  for (int r = 0; r < n; ++r) {
    lengths.push_back(Tensor::Empty({1}, DType::kInt64));
    staged_lengths.push_back(device.is_cpu() ? lengths.back() : Tensor::Empty({1}, DType::kInt64, device));
  }
  DDP_RETURN_IF_ERROR(AllGather(staged_lengths, Staged(my_length, device))->Wait(timeout()));
  for (int r = 0; r < n; ++r) Unstage(staged_lengths[r], lengths[r]);
  int64_t longest = 0;
  for (const Tensor& l : lengths) longest = std::max(longest, *l.data<int64_t>());
  Tensor mine = PackBytes(input, longest);
  std::vector<Tensor> payloads, staged_payloads;
  for (int r = 0; r < n; ++r) {
    payloads.push_back(Tensor::Empty(mine.shape(), DType::kInt64));
    staged_payloads.push_back(device.is_cpu() ? payloads.back() : Tensor::Empty(mine.shape(), DType::kInt64, device));
  }
  DDP_RETURN_IF_ERROR(AllGather(staged_payloads, Staged(mine, device))->Wait(timeout()));
  for (int r = 0; r < n; ++r) Unstage(staged_payloads[r], payloads[r]);
  outputs->clear();
  for (int r = 0; r < n; ++r) {
    const int64_t len = *lengths[r].data<int64_t>();
    if (len < 0 || len > longest)
      return absl::DataLossError(absl::StrCat("AllGatherObject: bad length from rank ", r));
    outputs->emplace_back(static_cast<const char*>(payloads[r].raw_data()), len);
  }
  return absl::OkStatus();
}

// The defaults of the collectives a backend may lack: a Work that failed with kUnimplemented.
namespace {
std::shared_ptr<Work> UnimplementedWork(const ProcessGroup& group, const std::string& call) {
  auto work = std::make_shared<AsyncWork>(DescribeCall(call, kUnnumbered, "", group.rank(), group.size(), ""));
  work->MarkStarted();
  work->Complete(absl::UnimplementedError(
      absl::StrCat(call, " is not implemented by the ", group.backend_name(), " backend (gloo has it)")));
  return work;
}
}  // namespace

std::shared_ptr<Work> ProcessGroup::Gather(const std::vector<Tensor>&, const Tensor&, int) {
  return UnimplementedWork(*this, "Gather");
}
std::shared_ptr<Work> ProcessGroup::Scatter(const Tensor&, const std::vector<Tensor>&, int) {
  return UnimplementedWork(*this, "Scatter");
}
std::shared_ptr<Work> ProcessGroup::AllToAll(const std::vector<Tensor>&, const std::vector<Tensor>&) {
  return UnimplementedWork(*this, "AllToAll");
}
std::shared_ptr<Work> ProcessGroup::Send(const Tensor&, int, int) { return UnimplementedWork(*this, "Send"); }
std::shared_ptr<Work> ProcessGroup::Recv(const Tensor&, int, int) { return UnimplementedWork(*this, "Recv"); }
absl::Status ProcessGroup::MonitoredBarrier(absl::Duration, bool) {
  return absl::UnimplementedError(
      absl::StrCat("MonitoredBarrier is not implemented by the ", backend_name(), " backend (gloo has it)"));
}

}  // namespace ddp
