// ProcessGroup: the collective-communication interface the Reducer and DDP talk through. START HERE
// for comm/. Backends: ProcessGroupGloo (CPU tensors over TCP, comm/gloo/process_group_gloo.h),
// ProcessGroupShm, ProcessGroupMpi and ProcessGroupHierarchical, which share the argument checks, call
// names and work queue of QueuedProcessGroup (comm/queued_process_group.h), and ProcessGroupNccl (CUDA
// tensors, --config=cuda). InitProcessGroup (comm/init.h) builds one from torchrun-style environment
// variables.
//
// Contract shared by every backend:
//   * Every collective returns a Work handle at once; the operation runs asynchronously.
//   * Works issued by one thread complete in issue order (one queue per group).
//   * Tensors passed to a collective must stay alive and untouched until its Work completes (the Work
//     keeps a reference, so "alive" is automatic; "untouched" is the caller's job).
//   * Every rank must issue the same collectives in the same order with matching shapes and dtypes.
//   * A peer that dies or stops answering fails the pending Work within the group's timeout with an
//     error naming the collective and the group/rank, never a silent hang.
// Thread safety: a ProcessGroup may be called from several threads; issue order across threads is the
// order calls reach the group's queue.
#ifndef DDP_COMM_PROCESS_GROUP_H_
#define DDP_COMM_PROCESS_GROUP_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "tensor/tensor.h"

namespace ddp {

enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct };

// "sum", "avg", "min", "max", "product".
std::string ReduceOpName(ReduceOp op);

// The handle of one asynchronous collective. Thread-safe.
class Work {
 public:
  virtual ~Work() = default;
  // True once the operation finished, successfully or not.
  virtual bool IsCompleted() = 0;
  // Blocks the calling thread until the operation finished or `timeout` passed. Returns its status:
  // OK, the backend's error (naming the collective and rank), or DeadlineExceeded on timeout (the
  // operation itself may still complete later). For CUDA backends the data is ready on the host's
  // view of the device when this returns (host-blocking wait).
  virtual absl::Status Wait(absl::Duration timeout) = 0;
  // Makes later work on the caller's current CUDA stream wait for this operation without blocking the
  // host. For CPU backends it equals Wait(infinite-but-bounded-by-the-group-timeout).
  virtual absl::Status WaitStream() { return Wait(absl::InfiniteDuration()); }
  // Completion callback (future-like chaining, Note [Hook completion] in reducer/comm_hook.h): runs
  // `callback` once with the outcome when the operation finishes, on the thread that completes it (a
  // backend's worker), or at once on the calling thread if it already finished. The callback must be
  // short and must not Wait on other Works. Returns false, and never calls `callback`, where the backend
  // cannot notify completion (the default; then the caller waits instead). AsyncWork supports it.
  virtual bool AddCompletionCallback(std::function<void(const absl::Status&)> /*callback*/) { return false; }
  // Seconds the operation spent executing (from start on the backend to completion); 0 before.
  virtual double ExecutionSeconds() const { return 0.0; }
  // When the backend started and finished executing it (absl::InfinitePast() until known). Used for
  // the Reducer's overlap statistics and traces.
  virtual absl::Time StartTime() const { return absl::InfinitePast(); }
  virtual absl::Time EndTime() const { return absl::InfinitePast(); }
};

// A group of `size()` processes (or threads) numbered 0..size()-1.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "gloo", "nccl", ...
  virtual std::string backend_name() const = 0;
  // The timeout every collective of this group is bounded by.
  virtual absl::Duration timeout() const = 0;

  // In place: every rank's `tensor` becomes the reduction over ranks. REQUIRES: contiguous.
  virtual std::shared_ptr<Work> AllReduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum) = 0;
  // In place: every rank's `tensor` becomes root's.
  virtual std::shared_ptr<Work> Broadcast(const Tensor& tensor, int root) = 0;
  // outputs[r] receives rank r's `input`. REQUIRES: outputs.size() == size(), shapes equal.
  virtual std::shared_ptr<Work> AllGather(const std::vector<Tensor>& outputs, const Tensor& input) = 0;
  // `output` receives the reduction over ranks of inputs[rank()]. REQUIRES: inputs.size() == size().
  virtual std::shared_ptr<Work> ReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                              ReduceOp op = ReduceOp::kSum) = 0;
  // In place on `root` only: root's tensor becomes the reduction; other ranks' tensors are unspecified
  // afterwards (they may hold partial sums), as in PyTorch.
  virtual std::shared_ptr<Work> Reduce(const Tensor& tensor, int root, ReduceOp op = ReduceOp::kSum) = 0;
  // Completes once every rank reached it.
  virtual std::shared_ptr<Work> Barrier() = 0;

  // The collectives below (Note [More collectives] in comm/gloo/process_group_gloo_collectives.cc) have
  // defaults that return a failed Work (or Status) with kUnimplemented naming the call and the backend;
  // ProcessGroupGloo implements all of them.
  //
  // On `root`, outputs[r] receives rank r's `input`; other ranks pass no outputs (ignored if given).
  // REQUIRES: on root outputs.size() == size(); every tensor has input's element count and dtype.
  virtual std::shared_ptr<Work> Gather(const std::vector<Tensor>& outputs, const Tensor& input, int root);
  // Every rank's `output` receives root's inputs[rank()]; other ranks pass no inputs (ignored if given).
  // REQUIRES: on root inputs.size() == size(); every tensor has output's element count and dtype.
  virtual std::shared_ptr<Work> Scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root);
  // outputs[r] receives rank r's inputs[rank()] (PyTorch's all_to_all with lists, equal-size chunks).
  // REQUIRES: inputs.size() == outputs.size() == size(); all tensors of one element count and dtype.
  virtual std::shared_ptr<Work> AllToAll(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs);
  // Point to point: `tensor` goes to rank `dst`, whose Recv(tensor, this rank, tag) with the same element
  // count and dtype receives it. Only the two ranks take part; sends on one (peer, tag) arrive in order.
  // The Work completes once the data went out, which needs the peer's matching Recv posted (Gloo), bounded
  // by timeout(). REQUIRES: tag >= 0, dst != rank(), contiguous CPU tensor for Gloo.
  virtual std::shared_ptr<Work> Send(const Tensor& tensor, int dst, int tag = 0);
  // Receives into `tensor` what rank `src` sent with Send(..., tag). REQUIRES: as Send.
  virtual std::shared_ptr<Work> Recv(const Tensor& tensor, int src, int tag = 0);
  // PyTorch's monitored_barrier, blocking: rank 0 waits (at most `timeout`) until every other rank
  // arrived, then releases them. On timeout rank 0 returns kDeadlineExceeded naming the ranks that did
  // not arrive (every missing rank when `wait_all_ranks`, else the first one), and the other ranks
  // return that error too. Does not wait for collectives still in flight.
  virtual absl::Status MonitoredBarrier(absl::Duration timeout, bool wait_all_ranks = false);

  // The device whose tensors this group's collectives take: the CPU for Gloo, the rank's GPU for NCCL.
  virtual Device tensor_device() const { return Device::CPU(); }

  // A 1-D tensor of `numel` elements that this group communicates without staging copies, for buffers
  // that are communicated again and again (DDP's buckets): ProcessGroupShm places it in its shared heap,
  // which the peers read in place (Note [Zero-copy all-reduce] in comm/shm/allreduce_two_shot.cc); the other
  // backends, and shm when its heap is off or full, return Tensor::Empty. Contents uninitialised; any
  // tensor works with every collective, this one is only faster. Allocate once and reuse: a large buffer
  // gives its memory back to the system when freed, so one allocated per step would fault its pages in
  // every step.
  virtual Tensor NewCommBuffer(int64_t numel, DType dtype, Device device) {
    return Tensor::Empty({numel}, dtype, device);
  }

  // True when AllReduce(kAvg) costs no more than kSum: the division by size() is fused into the
  // reduction (ProcessGroupShm), where the other backends divide in a pass of their own afterwards. DDP
  // then hands its buckets over undivided instead of scaling every gradient first (Note [Averaging in
  // the collective] in reducer/reducer.h).
  virtual bool FusesAverage() const { return false; }

  // Blocking all-reduce (bounded by timeout()) of a small CPU tensor, staged through tensor_device() when
  // that is a GPU (as torch.distributed does for NCCL object collectives). For host-side totals such as
  // evaluation counts. REQUIRES: `host` is a contiguous CPU tensor.
  absl::Status AllReduceHost(const Tensor& host, ReduceOp op = ReduceOp::kSum);

  // Byte strings, blocking (bounded by timeout()): root's `data` is copied into every rank's `data`.
  // Both object collectives stage through tensor_device(), so they work over NCCL too.
  virtual absl::Status BroadcastObject(std::string* data, int root);
  // Every rank's `input`, in rank order, into `outputs`.
  virtual absl::Status AllGatherObject(const std::string& input, std::vector<std::string>* outputs);
};

}  // namespace ddp

#endif  // DDP_COMM_PROCESS_GROUP_H_
