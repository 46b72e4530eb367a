// QueuedProcessGroup: the skeleton shared by the backends that run their collectives one at a time, in
// issue order, on a worker thread (gloo, shm, mpi and the hierarchical group; NCCL queues on a CUDA
// stream instead). Its public collectives are the one place that checks a call's arguments (the
// backend's tensor rule, list sizes, roots, matching tensors), gives it its sequence number and names it
// ("<op> #<n> of <payload> on rank <r>/<s> (<backend>)", comm/collective_description.h). A backend
// implements only the work, in the protected Issue* hooks, and queues it with Issue; every queued body
// runs under one failure policy (Note [Broken groups] in the .cc). Every call is recorded in the group's
// flight recorder (comm/flight_recorder.h), and the first failure or hang is explained by its
// postmortem (comm/flight_recorder_postmortem.h): a dump, and the rank that is behind.
#ifndef DDP_COMM_QUEUED_PROCESS_GROUP_H_
#define DDP_COMM_QUEUED_PROCESS_GROUP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/wall_clock.h"
#include "comm/async_work.h"
#include "comm/collective_description.h"
#include "comm/flight_recorder.h"
#include "comm/flight_recorder_postmortem.h"
#include "comm/process_group.h"
#include "comm/work_queue.h"

namespace ddp {

class QueuedProcessGroup;

// The Work of one call of a QueuedProcessGroup. Its description is formatted only when asked for (an
// error, a timeout, a caller): a 4-byte shared-memory all-reduce takes about a microsecond, and
// formatting strings on every call would be a noticeable part of it. Thread-safe, as AsyncWork.
class QueuedWork : public AsyncWork {
 public:
  // Call `spec` of `group`, numbered `sequence` (kUnnumbered for none). `waiter_may_run`: a thread that
  // Waits on it may run it (Note [Waiter runs the work] in comm/gloo/process_group_gloo.cc). The Work
  // keeps the group's queue, not the group.
  QueuedWork(const QueuedProcessGroup& group, const CollectiveSpec& spec, uint64_t sequence, bool waiter_may_run);

  // With waiter_may_run, first runs the call on this thread when the wait covers the group's timeout and
  // the call is next in the queue with nothing running (WorkQueue::RunForWaiter). A wait that covered the
  // group's timeout and ends with the call still running is a hang: the kDeadlineExceeded error then
  // carries the group's postmortem (which rank is behind, in which call; Note [Hang postmortem] in
  // comm/flight_recorder_postmortem.cc), which blocks this thread at most its window longer.
  absl::Status Wait(absl::Duration timeout) override;
  // "<name> #<sequence> of <payload> on rank <rank>/<size> (<backend>)".
  std::string description() const override;

  // The call, and its place in the group's issue order (kUnnumbered for Send and Recv).
  const CollectiveSpec& spec() const { return spec_; }
  uint64_t sequence() const { return sequence_; }

 private:
  const CollectiveSpec spec_;
  const uint64_t sequence_;
  const int rank_;
  const int size_;
  const char* const backend_;              // a string literal
  const std::shared_ptr<WorkQueue> queue_;  // null unless a waiter may run the call
  const absl::Duration group_timeout_;
  // The group's postmortem, for a wait that times out; expired once the group is gone.
  const std::weak_ptr<GroupPostmortem> postmortem_;
};

// What a queued call's body gets while it runs: its Work and its deadline. Called, it gives the prefix of
// the call's errors, "<description> failed" (so it serves as a comm/shm ShmWhat).
struct RunningCall {
  const QueuedWork* work;
  // Now + the group's timeout when the body started; absl::InfiniteFuture() for an attempt that never
  // blocks (the shared-memory inline path).
  absl::Time deadline;
  std::string operator()() const;
};

// What every queued backend gives the skeleton.
struct QueuedProcessGroupOptions {
  // The backend's name in backend_name() and in every description ("gloo", "shm", ...). Must be a
  // string literal: Works keep the pointer and may outlive the group.
  const char* backend = "";
  // Bound on every collective: the deadline of each body, and the wait a waiter must cover to run it.
  absl::Duration timeout = absl::Seconds(300);
  // Whether a thread that Waits on a queued call may run it itself (Note [Waiter runs the work] in
  // comm/gloo/process_group_gloo.cc); Issue can still refuse it per call.
  bool waiter_runs_work = false;
  // The flight recorder and what the group does when a call fails or times out (Note [Flight recorder]
  // in comm/flight_recorder.cc, Note [Hang postmortem]): by default the recorder's settings come from
  // the environment and no store is used.
  PostmortemOptions postmortem;
};

// The choices QueuedProcessGroup::Issue leaves to each call.
struct QueuedIssueOptions {
  // Takes the next sequence number; false for calls outside the ranks' common order (Send, Recv).
  bool numbered = true;
  // A waiter may run it, where QueuedProcessGroupOptions::waiter_runs_work allows that at all (false,
  // e.g., for calls whose body must run on the worker).
  bool waiter_may_run = true;
};

class QueuedProcessGroup : public ProcessGroup {
 public:
  // Stops the queue (StopQueue) if the backend's destructor did not.
  ~QueuedProcessGroup() override;

  // As comm/process_group.h says, from the constructor's arguments (options.backend, options.timeout).
  int rank() const final { return rank_; }
  int size() const final { return size_; }
  std::string backend_name() const final { return options_.backend; }
  absl::Duration timeout() const final { return options_.timeout; }
  // How many numbered calls (every collective but Send and Recv) were issued so far: the sequence number
  // the next one takes (c10d's getSequenceNumberForGroup). A call counts once it holds its place in issue
  // order, before its work runs. Thread-safe.
  uint64_t calls_issued() const;

  // The collectives of comm/process_group.h. Each checks its arguments (aborting, with a message naming
  // the call, on a broken REQUIRES) and hands them to the backend's hook below. Thread-safe.
  std::shared_ptr<Work> AllReduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum) final;
  std::shared_ptr<Work> Broadcast(const Tensor& tensor, int root) final;
  std::shared_ptr<Work> AllGather(const std::vector<Tensor>& outputs, const Tensor& input) final;
  std::shared_ptr<Work> ReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                      ReduceOp op = ReduceOp::kSum) final;
  std::shared_ptr<Work> Reduce(const Tensor& tensor, int root, ReduceOp op = ReduceOp::kSum) final;
  std::shared_ptr<Work> Barrier() final;
  // On root only the list is checked; other ranks' lists are ignored, as comm/process_group.h says.
  std::shared_ptr<Work> Gather(const std::vector<Tensor>& outputs, const Tensor& input, int root) final;
  std::shared_ptr<Work> Scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root) final;
  std::shared_ptr<Work> AllToAll(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs) final;

 protected:
  // A queued call's work: returns the status its Work completes with.
  using Body = std::function<absl::Status(const RunningCall&)>;

  // Starts the worker thread. REQUIRES: 0 <= rank < size.
  QueuedProcessGroup(int rank, int size, QueuedProcessGroupOptions options);

  // The backend's rule for the tensors of a `kind` call, checked for every tensor the call takes before
  // its hook runs. The default: a contiguous CPU tensor (CheckCpuCollectiveTensor).
  virtual void CheckTensor(CollectiveKind kind, const Tensor& t) const;

  // The backend's work, with arguments already checked and `spec` naming the call. Each returns the
  // call's Work at once, normally Issue(spec, body). Gather, Scatter and AllToAll default to
  // comm/process_group.h's kUnimplemented Work.
  virtual std::shared_ptr<Work> IssueAllReduce(const CollectiveSpec& spec, const Tensor& tensor, ReduceOp op) = 0;
  virtual std::shared_ptr<Work> IssueBroadcast(const CollectiveSpec& spec, const Tensor& tensor, int root) = 0;
  virtual std::shared_ptr<Work> IssueAllGather(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                               const Tensor& input) = 0;
  virtual std::shared_ptr<Work> IssueReduceScatter(const CollectiveSpec& spec, const Tensor& output,
                                                   const std::vector<Tensor>& inputs, ReduceOp op) = 0;
  virtual std::shared_ptr<Work> IssueReduce(const CollectiveSpec& spec, const Tensor& tensor, int root,
                                            ReduceOp op) = 0;
  virtual std::shared_ptr<Work> IssueBarrier(const CollectiveSpec& spec) = 0;
  virtual std::shared_ptr<Work> IssueGather(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                            const Tensor& input, int root);
  virtual std::shared_ptr<Work> IssueScatter(const CollectiveSpec& spec, const Tensor& output,
                                             const std::vector<Tensor>& inputs, int root);
  virtual std::shared_ptr<Work> IssueAllToAll(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                              const std::vector<Tensor>& inputs);

  // Runs once, on the thread that ran the call, when a call first fails and breaks the group (Note
  // [Broken groups]), e.g. to tell the peers. The default does nothing. The group writes its flight
  // recorder dump right after.
  virtual void OnFailure(const absl::Status& failure);
  // The group's postmortem (Note [Hang postmortem]), for a backend whose failure path explains its
  // errors itself (ProcessGroupGloo::Fail).
  GroupPostmortem& postmortem() { return *postmortem_; }
  // The Work of call `spec` numbered `sequence`. The default makes a QueuedWork; a backend whose Works
  // do more on Wait returns a subclass.
  virtual std::shared_ptr<QueuedWork> NewWork(const CollectiveSpec& spec, uint64_t sequence, bool waiter_may_run);

  // Queues `body` for call `spec` (after every call issued before) and returns its Work. The body runs
  // under Guarded. Thread-safe: sequence numbers and queue order agree across issuing threads.
  std::shared_ptr<Work> Issue(const CollectiveSpec& spec, Body body,
                              QueuedIssueOptions options = QueuedIssueOptions());
  // As Issue, for a call that starts on the calling thread: `start` runs under the issue lock, at the
  // call's place in issue order (Gloo's Send and Recv post their transfer there), and returns the body.
  std::shared_ptr<Work> IssueStarted(const CollectiveSpec& spec, absl::FunctionRef<Body()> start,
                                     QueuedIssueOptions options = QueuedIssueOptions());

  // Runs `body` (absl::Status(const RunningCall&)) for `work` unless the group is broken; a failure
  // breaks it (Note [Broken groups]). `blocking` false gives the body no deadline (and reads no clock):
  // for attempts that never block. Inline, so that the shared-memory inline path pays no extra call.
  // REQUIRES: the caller holds the queue's turn (a queued body, or between TryBeginInline and EndInline).
  template <typename BodyFn>
  absl::Status Guarded(const QueuedWork& work, BodyFn&& body, bool blocking = true) {
    if (!broken_.ok()) return Refused(work);
    const RunningCall call{&work, blocking ? WallNow() + options_.timeout : absl::InfiniteFuture()};
    absl::Status status = body(call);
    if (!status.ok()) Break(work, status);
    return status;
  }

  // The inline path (Note [Inline collectives] in comm/shm/process_group_shm.cc): when nothing is queued
  // or running, takes the queue's turn and returns the Work of call `spec` (numbered; never run by a
  // waiter), which the caller then runs on its own thread with Guarded; nullptr when the queue is busy.
  // Every Work returned must be followed by exactly one EndInline.
  std::shared_ptr<QueuedWork> TryBeginInline(const CollectiveSpec& spec);
  // Gives the turn back.
  void EndInline() { queue_->EndInline(); }
  // Gives the turn back and queues `rest` (under Guarded) for `work` ahead of every call issued
  // meanwhile, so a call the caller could not finish without blocking continues on the worker, in order.
  void EndInline(std::shared_ptr<QueuedWork> work, Body rest);

  // Cancels the queued calls and joins the worker once the running call finished (WorkQueue::Stop),
  // then detaches the postmortem from the store (a Work may outlive the group and its store).
  // REQUIRES: the first statement of the backend's destructor, before the members its bodies use go.
  void StopQueue();

 private:
  friend class QueuedWork;

  // Under the issue lock: the next sequence number, or kUnnumbered.
  uint64_t TakeSequence(bool numbered) ABSL_EXCLUSIVE_LOCKS_REQUIRED(recorder_->mu());
  // Under the issue lock: numbers call `spec`, makes its Work (NewWork) and records it.
  std::shared_ptr<QueuedWork> NewRecordedWork(const CollectiveSpec& spec, bool numbered, bool waiter_may_run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(recorder_->mu());
  // Guarded's two outcomes beside success: the Status of a call refused by a broken group, and breaking
  // the group with `failure` (OnFailure included).
  absl::Status Refused(const QueuedWork& work) const;
  void Break(const QueuedWork& work, const absl::Status& failure);

  const int rank_;
  const int size_;
  const QueuedProcessGroupOptions options_;
  // The first failure (Note [Broken groups]). Used only by whoever holds the queue's turn.
  absl::Status broken_;
  // Dumps, exchanges and explains the first failure; shared with the Works (weakly).
  const std::shared_ptr<GroupPostmortem> postmortem_;
  // postmortem_'s recorder. Its mu() is the issue lock: a call is numbered, queued and recorded under
  // it, so sequence numbers, queue order and the ring's order agree (Note [Flight recorder]).
  FlightRecorder* const recorder_;
  uint64_t next_sequence_ ABSL_GUARDED_BY(recorder_->mu()) = 0;
  // Runs the calls in issue order. Shared with the Works a waiter may run; stopped by StopQueue.
  const std::shared_ptr<WorkQueue> queue_;
};

}  // namespace ddp

#endif  // DDP_COMM_QUEUED_PROCESS_GROUP_H_
