#include "comm/process_group.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ddp {
namespace {

// Bytes travel as int64 elements (8 bytes each), zero-padded.
Tensor PackBytes(const std::string& bytes, int64_t capacity) {
  Tensor t = Tensor::Empty({(capacity + 7) / 8}, DType::kInt64);
  std::memset(t.raw_data(), 0, t.nbytes());
  std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

}  // namespace

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
  Tensor length = Tensor::Empty({1}, DType::kInt64);
  *length.data<int64_t>() = static_cast<int64_t>(data->size());
  DDP_RETURN_IF_ERROR(Broadcast(length, root)->Wait(timeout()));
  const int64_t n = *length.data<int64_t>();
  if (n < 0) return absl::DataLossError(absl::StrCat("BroadcastObject: bad length ", n, " from rank ", root));
  Tensor payload = PackBytes(rank() == root ? *data : std::string(), n);
  DDP_RETURN_IF_ERROR(Broadcast(payload, root)->Wait(timeout()));
  data->assign(static_cast<const char*>(payload.raw_data()), n);
  return absl::OkStatus();
}

absl::Status ProcessGroup::AllGatherObject(const std::string& input, std::vector<std::string>* outputs) {
  const int n = size();
  Tensor my_length = Tensor::Empty({1}, DType::kInt64);
  *my_length.data<int64_t>() = static_cast<int64_t>(input.size());
  std::vector<Tensor> lengths;
  for (int r = 0; r < n; ++r) lengths.push_back(Tensor::Empty({1}, DType::kInt64));
  DDP_RETURN_IF_ERROR(AllGather(lengths, my_length)->Wait(timeout()));
  int64_t longest = 0;
  for (const Tensor& l : lengths) longest = std::max(longest, *l.data<int64_t>());
  Tensor mine = PackBytes(input, longest);
  std::vector<Tensor> payloads;
  for (int r = 0; r < n; ++r) payloads.push_back(Tensor::Empty(mine.shape(), DType::kInt64));
  DDP_RETURN_IF_ERROR(AllGather(payloads, mine)->Wait(timeout()));
  outputs->clear();
  for (int r = 0; r < n; ++r) {
    const int64_t len = *lengths[r].data<int64_t>();
    if (len < 0 || len > longest)
      return absl::DataLossError(absl::StrCat("AllGatherObject: bad length from rank ", r));
    outputs->emplace_back(static_cast<const char*>(payloads[r].raw_data()), len);
  }
  return absl::OkStatus();
}

}  // namespace ddp
