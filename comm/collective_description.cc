#include "comm/collective_description.h"

#include "absl/strings/str_cat.h"

namespace ddp {

const char* CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "AllReduce";
    case CollectiveKind::kBroadcast: return "Broadcast";
    case CollectiveKind::kAllGather: return "AllGather";
    case CollectiveKind::kReduceScatter: return "ReduceScatter";
    case CollectiveKind::kReduce: return "Reduce";
    case CollectiveKind::kBarrier: return "Barrier";
    case CollectiveKind::kGather: return "Gather";
    case CollectiveKind::kScatter: return "Scatter";
    case CollectiveKind::kAllToAll: return "AllToAll";
    case CollectiveKind::kSend: return "Send";
    case CollectiveKind::kRecv: return "Recv";
    case CollectiveKind::kMonitoredBarrier: return "MonitoredBarrier";
  }
  return "an unknown collective";
}

std::string CollectiveSpec::Name() const {
  const char* name = CollectiveKindName(kind);
  switch (kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduceScatter:
      return absl::StrCat(name, "(", ReduceOpName(op), ")");
    case CollectiveKind::kReduce:
      return absl::StrCat(name, "(", ReduceOpName(op), ", root ", root, ")");
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kGather:
    case CollectiveKind::kScatter:
      return absl::StrCat(name, "(root ", root, ")");
    case CollectiveKind::kSend:
      return absl::StrCat(name, "(to rank ", root, ", tag ", tag, ")");
    case CollectiveKind::kRecv:
      return absl::StrCat(name, "(from rank ", root, ", tag ", tag, ")");
    default:
      return name;
  }
}

std::string CollectiveSpec::Payload() const {
  if (kind == CollectiveKind::kBarrier || kind == CollectiveKind::kMonitoredBarrier) return "";
  return absl::StrCat(numel, " ", DTypeName(dtype));
}

std::string CollectiveSpec::Signature() const {
  const std::string payload = Payload();
  return payload.empty() ? Name() : absl::StrCat(Name(), " of ", payload);
}

std::string DescribeCall(absl::string_view name, uint64_t sequence, absl::string_view payload, int rank, int size,
                         absl::string_view backend) {
  std::string text(name);
  if (sequence != kUnnumbered) absl::StrAppend(&text, " #", sequence);
  if (!payload.empty()) absl::StrAppend(&text, " of ", payload);
  absl::StrAppend(&text, " on rank ", rank, "/", size);
  if (!backend.empty()) absl::StrAppend(&text, " (", backend, ")");
  return text;
}

std::string DescribeCall(const CollectiveSpec& spec, uint64_t sequence, int rank, int size, absl::string_view backend) {
  return DescribeCall(spec.Name(), sequence, spec.Payload(), rank, size, backend);
}

}  // namespace ddp
