// ProcessGroupGloo: the CPU backend, over Debian's libgloo (TCP transport).
#ifndef DDP_COMM_GLOO_PROCESS_GROUP_GLOO_H_
#define DDP_COMM_GLOO_PROCESS_GROUP_GLOO_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/collective_call.h"
#include "comm/flight_recorder.h"
#include "comm/queued_process_group.h"
#include "store/store.h"

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
  // When a collective fails or hangs, how long to wait for the other ranks' failure reports so the error
  // can name the lost rank or the one that is behind (Note [Failure reports] in comm/failure_reports.cc,
  // Note [Hang postmortem] in comm/flight_recorder_postmortem.cc). Paid only on failure.
  absl::Duration failure_report_window = absl::Seconds(3);
  // The flight recorder's size and dump folder (comm/flight_recorder.h). nullopt: from
  // DDP_FLIGHT_RECORDER_ENTRIES and DDP_FLIGHT_RECORDER_DIR; Create fails naming a bad value.
  std::optional<FlightRecorderOptions> flight_recorder;
  // The rank whose process serves `store` (rank 0 under tcp:// or env:// when ddprun does not serve it),
  // -1 when none does: when the store is unreachable after a failure, the error names that rank.
  int store_host_rank = -1;
};

// Collectives on CPU tensors (float32, float16, bfloat16, int64). One background worker thread runs the
// collectives in issue order, so every call returns at once with a Work. Thread-safe. A thread that
// Waits, with at least the group's timeout, on a Work that is next in line while nothing runs runs that
// collective itself instead of handing it to the worker (Note [Waiter runs the work] in the .cc); its
// completion callbacks then run on that thread.
// CUDA tensors (builds with --config=cuda): AllReduce and Broadcast also take them, staged through host
// memory on the worker (Note [Host staging] in comm/host_staging.cc): the copy waits for the work the
// caller enqueued on its current stream before the call, and the Work completes once the result is back
// in device memory. Every other collective takes CPU tensors only (aborts otherwise).
// Errors: a failed collective's Work holds a Status naming the collective (operation, element count,
// dtype, sequence number, rank) and, after the ranks exchanged failure reports, the lost rank; the group
// is then broken and every later collective fails at once with that error (Note [Broken groups] in
// comm/queued_process_group.cc). Ranks that call different collectives at the same
// position (e.g. another element count) never exchange data: each fails at the timeout, naming what every
// rank called (Note [Collective tags]); DDP_DEBUG=detail reports it at once instead.
class ProcessGroupGloo : public QueuedProcessGroup {
 public:
  // Rendezvous through `store` and connect a full mesh of TCP pairs. Fails with kFailedPrecondition
  // naming both values when the ranks were started with different world sizes, and with kUnavailable
  // naming the ranks that never joined ("rank 1 never joined") when peers do not show up within
  // options.timeout (Note [Rendezvous checks]). Gloo's exceptions become Statuses; none escapes. `store`
  // is not owned and must outlive the group: a failed collective exchanges failure reports through it,
  // so the error names the lost rank. REQUIRES: 0 <= rank < size.
  static absl::StatusOr<std::unique_ptr<ProcessGroupGloo>> Create(Store& store, int rank, int size,
                                                                   const ProcessGroupGlooOptions& options = {});
  // As above, with a store the group owns (a subgroup's PrefixStore, comm/new_group.h).
  // REQUIRES: store != nullptr.
  static absl::StatusOr<std::unique_ptr<ProcessGroupGloo>> CreateOwningStore(
      std::unique_ptr<Store> store, int rank, int size, const ProcessGroupGlooOptions& options = {});
  // Drains the queue (pending works fail with "process group destroyed") and joins the worker; a
  // collective running now, on the worker or on a waiting thread, finishes first.
  ~ProcessGroupGloo() override;

  // The options the group was created with.
  const ProcessGroupGlooOptions& options() const { return options_; }

  // The collectives are QueuedProcessGroup's (checked there); these three are Gloo's alone, in
  // comm/gloo/process_group_gloo_collectives.cc (Note [Point-to-point tags], Note [Monitored barrier]).
  std::shared_ptr<Work> Send(const Tensor& tensor, int dst, int tag = 0) override;
  std::shared_ptr<Work> Recv(const Tensor& tensor, int src, int tag = 0) override;
  absl::Status MonitoredBarrier(absl::Duration timeout, bool wait_all_ranks = false) override;

 private:
  // `group_id` names the flight recorder's dumps (AgreeFlightGroupId).
  ProcessGroupGloo(std::shared_ptr<gloo::Context> context, Store* store, int rank, int size,
                   ProcessGroupGlooOptions options, std::string group_id);

  // CPU tensors; in CUDA builds AllReduce and Broadcast also take contiguous CUDA tensors (staged).
  void CheckTensor(CollectiveKind kind, const Tensor& t) const override;
  std::shared_ptr<Work> IssueAllReduce(const CollectiveSpec& spec, const Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> IssueBroadcast(const CollectiveSpec& spec, const Tensor& tensor, int root) override;
  std::shared_ptr<Work> IssueAllGather(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                       const Tensor& input) override;
  std::shared_ptr<Work> IssueReduceScatter(const CollectiveSpec& spec, const Tensor& output,
                                           const std::vector<Tensor>& inputs, ReduceOp op) override;
  std::shared_ptr<Work> IssueReduce(const CollectiveSpec& spec, const Tensor& tensor, int root, ReduceOp op) override;
  std::shared_ptr<Work> IssueBarrier(const CollectiveSpec& spec) override;
  // In comm/gloo/process_group_gloo_collectives.cc (Note [More collectives]).
  std::shared_ptr<Work> IssueGather(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                    const Tensor& input, int root) override;
  std::shared_ptr<Work> IssueScatter(const CollectiveSpec& spec, const Tensor& output,
                                     const std::vector<Tensor>& inputs, int root) override;
  std::shared_ptr<Work> IssueAllToAll(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                      const std::vector<Tensor>& inputs) override;

  // The queued body of a Gloo call: runs `body` with the call's Gloo tag (Note [Collective tags]); any
  // exception it throws fails the call through Fail. The call is {sequence, signature} of the running
  // call, or `fixed_call` where given (Send and Recv: Note [Point-to-point tags]).
  Body GlooBody(std::function<void(uint32_t tag)> body, std::optional<CollectiveCall> fixed_call = std::nullopt);
  // The AllReduce body on a host tensor (a CPU tensor, or a CUDA tensor's host copy: Note [Host staging]
  // in comm/host_staging.cc). Runs on the worker; Gloo's exceptions propagate to GlooBody.
  void AllReduceOnHost(const Tensor& tensor, ReduceOp op, uint32_t tag);
  // Send and Recv: posts the transfer on the calling thread and queues its wait.
  std::shared_ptr<Work> PointToPoint(const CollectiveSpec& spec, const Tensor& tensor);
  // The ring reduce-scatter of the ReduceScatter body (Note [Ring reduce-scatter]).
  void RingReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op, uint32_t tag);
  // The failure path of `call` (whose Work is `work`), the call that broke the group (Note [Broken groups] in
  // comm/queued_process_group.cc: it runs once): closes the connections, then the postmortem exchanges
  // reports (Note [Hang postmortem]); returns `failure` with the ranks that called something else, the
  // lost rank and the rank that is behind.
  absl::Status Fail(const CollectiveCall& call, const std::string& failure, const QueuedWork& work);

  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<Store> owned_store_;  // Set by CreateOwningStore; store_ points into it.
  Store* const store_;  // Not owned (unless owned_store_).
  ProcessGroupGlooOptions options_;
  std::atomic<int64_t> monitored_barriers_{0};  // MonitoredBarrier calls so far
};

}  // namespace ddp

#endif  // DDP_COMM_GLOO_PROCESS_GROUP_GLOO_H_
