// How every backend names a collective call in its Work and its errors: the call (CollectiveSpec: kind,
// reduce op, root or peer, element count, dtype) and the one description format,
//   "<name> #<sequence> of <payload> on rank <rank>/<size> (<backend>)",
// e.g. "AllReduce(sum) #12 of 1000 float32 on rank 1/4 (gloo)".
#ifndef DDP_COMM_COLLECTIVE_DESCRIPTION_H_
#define DDP_COMM_COLLECTIVE_DESCRIPTION_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "comm/process_group.h"
#include "tensor/tensor.h"

namespace ddp {

// The calls of the ProcessGroup interface (comm/process_group.h), one per public method.
enum class CollectiveKind : uint8_t {
  kAllReduce,
  kBroadcast,
  kAllGather,
  kReduceScatter,
  kReduce,
  kBarrier,
  kGather,
  kScatter,
  kAllToAll,
  kSend,
  kRecv,
  kMonitoredBarrier,
};

// "AllReduce", "Broadcast", ...: the method's name.
const char* CollectiveKindName(CollectiveKind kind);

// One call as descriptions and signatures name it. Plain data (no strings): a backend keeps it in its
// Work and formats it only when an error or a caller asks, so a small collective does not pay for text.
struct CollectiveSpec {
  CollectiveKind kind = CollectiveKind::kBarrier;
  ReduceOp op = ReduceOp::kSum;  // AllReduce, ReduceScatter and Reduce only
  int root = -1;                 // the root (Broadcast, Reduce, Gather, Scatter) or peer (Send, Recv)
  int tag = 0;                   // Send and Recv only
  int64_t numel = 0;             // the payload: elements per rank (none for the barriers)
  DType dtype = DType::kFloat32;

  // One factory per call; `t` is the tensor whose element count and dtype the call moves per rank.
  static CollectiveSpec AllReduce(const Tensor& t, ReduceOp op);
  static CollectiveSpec Broadcast(const Tensor& t, int root);
  static CollectiveSpec AllGather(const Tensor& input);
  static CollectiveSpec ReduceScatter(const Tensor& output, ReduceOp op);
  static CollectiveSpec Reduce(const Tensor& t, int root, ReduceOp op);
  static CollectiveSpec Barrier();
  static CollectiveSpec Gather(const Tensor& input, int root);
  static CollectiveSpec Scatter(const Tensor& output, int root);
  static CollectiveSpec AllToAll(const Tensor& input);
  static CollectiveSpec Send(const Tensor& t, int dst, int tag);
  static CollectiveSpec Recv(const Tensor& t, int src, int tag);
  static CollectiveSpec MonitoredBarrier();

  // The call with its arguments: "AllReduce(sum)", "Broadcast(root 0)", "Reduce(max, root 1)",
  // "Send(to rank 1, tag 5)", "Recv(from rank 0, tag 5)", "AllGather", "Barrier".
  std::string Name() const;
  // What it moves per rank, "1000 float32"; "" for the barriers.
  std::string Payload() const;
  // Name() and Payload(), "AllReduce(sum) of 1000 float32" ("Barrier" alone): what every rank must call
  // alike at one position of a group's issue order (CollectiveCall::signature, comm/collective_call.h).
  std::string Signature() const;
};

// The factories are inline: the smallest collectives build a spec on every call.
namespace collective_description_internal {
inline CollectiveSpec Make(CollectiveKind kind, const Tensor* t, ReduceOp op, int root, int tag) {
  CollectiveSpec spec;
  spec.kind = kind;
  spec.op = op;
  spec.root = root;
  spec.tag = tag;
  if (t != nullptr) {
    spec.numel = t->numel();
    spec.dtype = t->dtype();
  }
  return spec;
}
}  // namespace collective_description_internal

inline CollectiveSpec CollectiveSpec::AllReduce(const Tensor& t, ReduceOp op) {
  return collective_description_internal::Make(CollectiveKind::kAllReduce, &t, op, -1, 0);
}
inline CollectiveSpec CollectiveSpec::Broadcast(const Tensor& t, int root) {
  return collective_description_internal::Make(CollectiveKind::kBroadcast, &t, ReduceOp::kSum, root, 0);
}
inline CollectiveSpec CollectiveSpec::AllGather(const Tensor& input) {
  return collective_description_internal::Make(CollectiveKind::kAllGather, &input, ReduceOp::kSum, -1, 0);
}
inline CollectiveSpec CollectiveSpec::ReduceScatter(const Tensor& output, ReduceOp op) {
  return collective_description_internal::Make(CollectiveKind::kReduceScatter, &output, op, -1, 0);
}
inline CollectiveSpec CollectiveSpec::Reduce(const Tensor& t, int root, ReduceOp op) {
  return collective_description_internal::Make(CollectiveKind::kReduce, &t, op, root, 0);
}
inline CollectiveSpec CollectiveSpec::Barrier() {
  return collective_description_internal::Make(CollectiveKind::kBarrier, nullptr, ReduceOp::kSum, -1, 0);
}
inline CollectiveSpec CollectiveSpec::Gather(const Tensor& input, int root) {
  return collective_description_internal::Make(CollectiveKind::kGather, &input, ReduceOp::kSum, root, 0);
}
inline CollectiveSpec CollectiveSpec::Scatter(const Tensor& output, int root) {
  return collective_description_internal::Make(CollectiveKind::kScatter, &output, ReduceOp::kSum, root, 0);
}
inline CollectiveSpec CollectiveSpec::AllToAll(const Tensor& input) {
  return collective_description_internal::Make(CollectiveKind::kAllToAll, &input, ReduceOp::kSum, -1, 0);
}
inline CollectiveSpec CollectiveSpec::Send(const Tensor& t, int dst, int tag) {
  return collective_description_internal::Make(CollectiveKind::kSend, &t, ReduceOp::kSum, dst, tag);
}
inline CollectiveSpec CollectiveSpec::Recv(const Tensor& t, int src, int tag) {
  return collective_description_internal::Make(CollectiveKind::kRecv, &t, ReduceOp::kSum, src, tag);
}
inline CollectiveSpec CollectiveSpec::MonitoredBarrier() {
  return collective_description_internal::Make(CollectiveKind::kMonitoredBarrier, nullptr, ReduceOp::kSum, -1, 0);
}

// The sequence number of a call that takes none (Send, Recv; calls outside a group's issue order).
inline constexpr uint64_t kUnnumbered = ~uint64_t{0};

// The description of a call: "<name> #<sequence> of <payload> on rank <rank>/<size> (<backend>)".
// " #<sequence>" is left out for kUnnumbered, " of <payload>" for an empty payload and " (<backend>)"
// for an empty backend. Pure.
std::string DescribeCall(absl::string_view name, uint64_t sequence, absl::string_view payload, int rank, int size,
                         absl::string_view backend);
// The same for `spec` (its Name() and Payload()).
std::string DescribeCall(const CollectiveSpec& spec, uint64_t sequence, int rank, int size, absl::string_view backend);

}  // namespace ddp

#endif  // DDP_COMM_COLLECTIVE_DESCRIPTION_H_
