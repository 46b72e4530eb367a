// ProcessGroupGloo: the CPU backend, over Debian's libgloo (TCP transport).
#ifndef DDP_COMM_PROCESS_GROUP_GLOO_H_
#define DDP_COMM_PROCESS_GROUP_GLOO_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/failure_reports.h"
#include "comm/process_group.h"
#include "comm/store.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace ddp {

struct ProcessGroupGlooOptions {
  // Bound on connecting and on every collective (PyTorch's default process-group timeout).
  absl::Duration timeout = absl::Seconds(300);
  // The address peers use to reach this rank. "127.0.0.1" for single-host jobs; InitProcessGroup picks
  // the address of the interface that routes to MASTER_ADDR (or GLOO_SOCKET_IFADDR when set).
  std::string hostname = "127.0.0.1";
  // When a collective fails, how long to wait for the other ranks' failure reports so the error can
  // name the lost rank (Note [Failure reports] in comm/failure_reports.cc). Paid only on failure.
  absl::Duration failure_report_window = absl::Seconds(3);
};

// Collectives on CPU tensors (float32, float16, bfloat16, int64). One background worker thread runs the
// collectives in issue order, so every call returns at once with a Work. Thread-safe.
class ProcessGroupGloo : public ProcessGroup {
 public:
  // Rendezvous through `store` and connect a full mesh of TCP pairs. Fails naming the rank and the store
  // keys when peers do not show up within options.timeout. `store` is not owned and must outlive the
  // group: a failed collective exchanges failure reports through it, so the error names the lost rank.
  // REQUIRES: 0 <= rank < size.
  static absl::StatusOr<std::unique_ptr<ProcessGroupGloo>> Create(Store& store, int rank, int size,
                                                                   const ProcessGroupGlooOptions& options = {});
  // Drains the queue (pending works fail with "process group destroyed") and joins the worker.
  ~ProcessGroupGloo() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "gloo"; }
  absl::Duration timeout() const override { return options_.timeout; }

  std::shared_ptr<Work> AllReduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum) override;
  std::shared_ptr<Work> Broadcast(const Tensor& tensor, int root) override;
  std::shared_ptr<Work> AllGather(const std::vector<Tensor>& outputs, const Tensor& input) override;
  std::shared_ptr<Work> ReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                      ReduceOp op = ReduceOp::kSum) override;
  std::shared_ptr<Work> Reduce(const Tensor& tensor, int root, ReduceOp op = ReduceOp::kSum) override;
  std::shared_ptr<Work> Barrier() override;

 private:
  class Worker;
  ProcessGroupGloo(std::shared_ptr<gloo::Context> context, Store* store, int rank, int size,
                   ProcessGroupGlooOptions options);

  std::shared_ptr<gloo::Context> context_;
  int rank_;
  int size_;
  ProcessGroupGlooOptions options_;
  FailureReports failure_reports_;
  // Allocates the next tag, describes the collective, and queues `body` (run on the worker with the
  // tag; a thrown exception fails the Work with the collective's description).
  std::shared_ptr<Work> Issue(const std::function<std::string(uint32_t)>& describe,
                              std::function<void(uint32_t)> body);

  absl::Mutex issue_mu_;
  uint32_t next_tag_ ABSL_GUARDED_BY(issue_mu_) = 0;
  std::unique_ptr<Worker> worker_;
};

}  // namespace ddp

#endif  // DDP_COMM_PROCESS_GROUP_GLOO_H_
