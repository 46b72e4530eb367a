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

namespace {

CollectiveSpec Moving(CollectiveKind kind, const Tensor& t) {
  CollectiveSpec spec;
  spec.kind = kind;
  spec.numel = t.numel();
  spec.dtype = t.dtype();
  return spec;
}

CollectiveSpec Reducing(CollectiveKind kind, const Tensor& t, ReduceOp op) {
  CollectiveSpec spec = Moving(kind, t);
  spec.op = op;
  return spec;
}

CollectiveSpec Rooted(CollectiveKind kind, const Tensor& t, int root) {
  CollectiveSpec spec = Moving(kind, t);
  spec.root = root;
  return spec;
}

CollectiveSpec PointToPoint(CollectiveKind kind, const Tensor& t, int peer, int tag) {
  CollectiveSpec spec = Rooted(kind, t, peer);
  spec.tag = tag;
  return spec;
}

}  // namespace

CollectiveSpec CollectiveSpec::AllReduce(const Tensor& t, ReduceOp op) {
  return Reducing(CollectiveKind::kAllReduce, t, op);
}
CollectiveSpec CollectiveSpec::Broadcast(const Tensor& t, int root) {
  return Rooted(CollectiveKind::kBroadcast, t, root);
}
CollectiveSpec CollectiveSpec::AllGather(const Tensor& input) { return Moving(CollectiveKind::kAllGather, input); }
CollectiveSpec CollectiveSpec::ReduceScatter(const Tensor& output, ReduceOp op) {
  return Reducing(CollectiveKind::kReduceScatter, output, op);
}
CollectiveSpec CollectiveSpec::Reduce(const Tensor& t, int root, ReduceOp op) {
  CollectiveSpec spec = Reducing(CollectiveKind::kReduce, t, op);
  spec.root = root;
  return spec;
}
CollectiveSpec CollectiveSpec::Barrier() { return CollectiveSpec{}; }
CollectiveSpec CollectiveSpec::Gather(const Tensor& input, int root) {
  return Rooted(CollectiveKind::kGather, input, root);
}
CollectiveSpec CollectiveSpec::Scatter(const Tensor& output, int root) {
  return Rooted(CollectiveKind::kScatter, output, root);
}
CollectiveSpec CollectiveSpec::AllToAll(const Tensor& input) { return Moving(CollectiveKind::kAllToAll, input); }
CollectiveSpec CollectiveSpec::Send(const Tensor& t, int dst, int tag) {
  return PointToPoint(CollectiveKind::kSend, t, dst, tag);
}
CollectiveSpec CollectiveSpec::Recv(const Tensor& t, int src, int tag) {
  return PointToPoint(CollectiveKind::kRecv, t, src, tag);
}
CollectiveSpec CollectiveSpec::MonitoredBarrier() {
  CollectiveSpec spec;
  spec.kind = CollectiveKind::kMonitoredBarrier;
  return spec;
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
