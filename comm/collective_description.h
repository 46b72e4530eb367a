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
