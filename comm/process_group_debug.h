// ProcessGroupDebug: the DDP_DEBUG=detail mode (PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL). It wraps a
// group and, before each collective, makes the ranks compare what they are about to call: (sequence
// number, operation, reduce op or root, dtype, element count). When they disagree, every rank's call
// fails at once with an error naming both ranks and both calls, e.g.
//   DDP_DEBUG=detail: collective mismatch at call #12: rank 0 calls AllReduce(sum) of 535820 float32,
//   rank 1 calls AllReduce(sum) of 3 float32
// instead of a backend crash, a hang, or two differently sized buffers reduced against each other.
// Note [Collective fingerprints]: the comparison (of the collectives, not Send/Recv) is one all-gather of 6 int64 per rank (sequence, operation, reduce op, root, dtype, count) on the
// wrapped group, issued and waited for (bounded by timeout()) before the real call, so a mismatched
// call is never issued. Its cost per collective is in BENCHMARKS.md (bench/allreduce --debug_detail).
//
// InitProcessGroup wraps its group in one when DDP_DEBUG=detail. Thread safety: as ProcessGroup; the
// fingerprint and the real call are issued under one lock, so calls from several threads stay paired.
#ifndef DDP_COMM_PROCESS_GROUP_DEBUG_H_
#define DDP_COMM_PROCESS_GROUP_DEBUG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "comm/collective_description.h"
#include "comm/process_group.h"

namespace ddp {

// The debug modes of DDP_DEBUG: "off" (or unset) and "detail" (case-insensitive).
enum class DebugMode { kOff, kDetail };

// Parses a DDP_DEBUG value; nullptr or "" is kOff. An unknown value is an InvalidArgument error naming
// the variable and the accepted values.
absl::StatusOr<DebugMode> ParseDebugMode(const char* value);

class ProcessGroupDebug : public ProcessGroup {
 public:
  // Takes ownership of `inner`. REQUIRES: inner != nullptr.
  explicit ProcessGroupDebug(std::unique_ptr<ProcessGroup> inner);
  // Does not take ownership. REQUIRES: `inner` outlives this object.
  explicit ProcessGroupDebug(ProcessGroup* inner);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend_name() const override { return inner_->backend_name(); }
  absl::Duration timeout() const override { return inner_->timeout(); }
  Device tensor_device() const override { return inner_->tensor_device(); }
  Tensor NewCommBuffer(int64_t numel, DType dtype, Device device) override {
    return inner_->NewCommBuffer(numel, dtype, device);
  }
  bool FusesAverage() const override { return inner_->FusesAverage(); }

  std::shared_ptr<Work> AllReduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum) override;
  std::shared_ptr<Work> Broadcast(const Tensor& tensor, int root) override;
  std::shared_ptr<Work> AllGather(const std::vector<Tensor>& outputs, const Tensor& input) override;
  std::shared_ptr<Work> ReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                      ReduceOp op = ReduceOp::kSum) override;
  std::shared_ptr<Work> Reduce(const Tensor& tensor, int root, ReduceOp op = ReduceOp::kSum) override;
  std::shared_ptr<Work> Barrier() override;
  // Gather, Scatter and AllToAll are compared like the collectives above (with their root). Send, Recv
  // and MonitoredBarrier are forwarded unchecked: point to point involves two ranks only, and the
  // monitored barrier is a check of its own.
  std::shared_ptr<Work> Gather(const std::vector<Tensor>& outputs, const Tensor& input, int root) override;
  std::shared_ptr<Work> Scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root) override;
  std::shared_ptr<Work> AllToAll(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs) override;
  std::shared_ptr<Work> Send(const Tensor& tensor, int dst, int tag = 0) override;
  std::shared_ptr<Work> Recv(const Tensor& tensor, int src, int tag = 0) override;
  absl::Status MonitoredBarrier(absl::Duration timeout, bool wait_all_ranks = false) override;

  // The wrapped group.
  ProcessGroup& inner() const { return *inner_; }

 private:
  // Compares `call` across ranks; on agreement issues `issue()` on the wrapped group, otherwise
  // returns a completed Work holding the mismatch error (or the fingerprint's own failure).
  std::shared_ptr<Work> Checked(const CollectiveSpec& call, const std::function<std::shared_ptr<Work>()>& issue);
  // The all-gather of every rank's fingerprint of call number `sequence`; OK when all agree.
  absl::Status CompareAcrossRanks(int64_t sequence, const CollectiveSpec& call);

  std::unique_ptr<ProcessGroup> owned_;
  ProcessGroup* const inner_;
  absl::Mutex mu_;
  int64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ddp

#endif  // DDP_COMM_PROCESS_GROUP_DEBUG_H_
