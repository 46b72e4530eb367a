// ProcessGroupNccl: the CUDA backend, over NCCL (only built with --config=cuda).
//
// Note [NCCL streams]: each group owns one communicator and one communication stream on its device.
// A collective records an event on the caller's current stream (tensor/cuda/context.h) and makes the
// communication stream wait for it, so it reads the tensor only after the kernels that wrote it; it
// then runs the NCCL call on the communication stream and records a completion event. Nothing blocks
// the host at issue time. Work::WaitStream() makes the caller's current stream wait for the completion
// event (no host block: the compute stream runs on once the data is ready); Work::Wait(timeout) blocks
// the host, polling the event and ncclCommGetAsyncError, and aborts the communicator (ncclCommAbort)
// when the timeout passes, so a hung peer fails the Work instead of hanging the job. Works only waited
// on by the stream are watched too: the group's CollectiveWatchdog thread polls every in-flight
// collective and the asynchronous error, and on expiry or error aborts the communicator and fails them
// naming the collective (Note [Collective watchdog], comm/collective_watchdog.h). After an abort or an
// asynchronous NCCL error every later collective of the group fails at once.
//
// NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), so on a one-GPU machine only world size 1
// runs.
#ifndef DDP_COMM_NCCL_PROCESS_GROUP_NCCL_H_
#define DDP_COMM_NCCL_PROCESS_GROUP_NCCL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/collective_watchdog.h"
#include "comm/process_group.h"
#include "store/store.h"

namespace ddp {

struct ProcessGroupNcclOptions {
  // Bound on the rendezvous and on every host-blocking Wait (PyTorch's default process-group timeout).
  absl::Duration timeout = absl::Seconds(300);
  // The CUDA device of this rank (InitProcessGroup passes LOCAL_RANK).
  int device = 0;
};

class NcclCommunicator;  // the communicator, its stream and its abort state (process_group_nccl.cc)

// Collectives on CUDA tensors (float32, float16, bfloat16, int64) of options.device. Thread-safe.
class ProcessGroupNccl : public ProcessGroup {
 public:
  // Rank 0 creates the NCCL unique id and publishes it in `store` (not owned; used only during
  // Create); the others read it within options.timeout. Fails naming the CUDA/NCCL call or the store
  // key. REQUIRES: 0 <= rank < size.
  static absl::StatusOr<std::unique_ptr<ProcessGroupNccl>> Create(Store& store, int rank, int size,
                                                                   const ProcessGroupNcclOptions& options = {});
  // Waits for the communication stream, then destroys the communicator (or nothing after an abort).
  ~ProcessGroupNccl() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "nccl"; }
  Device tensor_device() const override { return Device::CUDA(options_.device); }
  absl::Duration timeout() const override { return options_.timeout; }
  int device() const { return options_.device; }

  std::shared_ptr<Work> AllReduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum) override;
  std::shared_ptr<Work> Broadcast(const Tensor& tensor, int root) override;
  std::shared_ptr<Work> AllGather(const std::vector<Tensor>& outputs, const Tensor& input) override;
  std::shared_ptr<Work> ReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                      ReduceOp op = ReduceOp::kSum) override;
  std::shared_ptr<Work> Reduce(const Tensor& tensor, int root, ReduceOp op = ReduceOp::kSum) override;
  std::shared_ptr<Work> Barrier() override;

 private:
  ProcessGroupNccl(std::shared_ptr<NcclCommunicator> comm, int rank, int size, ProcessGroupNcclOptions options);

  std::shared_ptr<NcclCommunicator> comm_;
  // Polls in-flight collectives against the timeout (Note [Collective watchdog]); declared after comm_
  // so it stops (and drops its Works) before the communicator goes.
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  int rank_;
  int size_;
  ProcessGroupNcclOptions options_;
  absl::Mutex issue_mu_;  // keeps issue order = NCCL launch order across threads
  int64_t next_sequence_ ABSL_GUARDED_BY(issue_mu_) = 0;
};

}  // namespace ddp

#endif  // DDP_COMM_NCCL_PROCESS_GROUP_NCCL_H_
