#include "comm/queued_process_group.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "comm/collective_tensors.h"

namespace ddp {

// Note [Broken groups]
// The first call whose body fails breaks the group: the backend's OnFailure runs once (shm aborts its
// channel so that the peers fail now rather than at their timeout; mpi remembers that an operation may
// be stuck), and every later call fails at once, without running, with "<description> not run: the
// group failed before (<first error>)". After a failure the ranks no longer agree on where they stand in
// the issue order (a peer may have finished the call this rank failed, or never started it), so a later
// call could only pair with the wrong call or wait out the timeout; failing at once, naming the first
// error, tells the caller the cause instead. Only the holder of the queue's turn (the worker, a waiter
// running a call, or an inline caller) reads or writes the broken state, so it needs no lock.

QueuedWork::QueuedWork(const QueuedProcessGroup& group, const CollectiveSpec& spec, uint64_t sequence,
                       bool waiter_may_run)
    : AsyncWork(""),
      spec_(spec),
      sequence_(sequence),
      rank_(group.rank_),
      size_(group.size_),
      backend_(group.options_.backend),
      queue_(waiter_may_run ? group.queue_ : nullptr),
      group_timeout_(group.options_.timeout),
      postmortem_(group.postmortem_) {}

absl::Status QueuedWork::Wait(absl::Duration timeout) {
  if (queue_ != nullptr) queue_->RunForWaiter(*this, timeout, group_timeout_);
  absl::Status status = AsyncWork::Wait(timeout);
  // A hang (Note [Hang postmortem]): the wait covered the group's timeout and the call still runs. A
  // completed call's own kDeadlineExceeded was explained where it failed.
  if (ABSL_PREDICT_FALSE(absl::IsDeadlineExceeded(status)) && timeout >= group_timeout_ && !IsCompleted()) {
    if (std::shared_ptr<GroupPostmortem> postmortem = postmortem_.lock()) {
      const CollectiveCall call{static_cast<uint32_t>(sequence_), spec_.Signature()};
      const std::string error(status.message());
      status = absl::DeadlineExceededError(
          absl::StrCat(error, postmortem->Explain(error, sequence_ == kUnnumbered ? std::nullopt
                                                                                  : std::optional(call)).text));
    }
  }
  return status;
}

std::string QueuedWork::description() const { return DescribeCall(spec_, sequence_, rank_, size_, backend_); }

std::string RunningCall::operator()() const { return absl::StrCat(work->description(), " failed"); }

QueuedProcessGroup::QueuedProcessGroup(int rank, int size, QueuedProcessGroupOptions options)
    : rank_(rank),
      size_(size),
      options_(std::move(options)),
      postmortem_(std::make_shared<GroupPostmortem>(options_.backend, rank, size, options_.timeout,
                                                    options_.postmortem)),
      recorder_(postmortem_->recorder()),
      queue_(std::make_shared<WorkQueue>()) {
  DDP_CHECK(rank >= 0 && rank < size) << options_.backend << ": rank " << rank << " is outside a group of " << size;
}

QueuedProcessGroup::~QueuedProcessGroup() { StopQueue(); }

void QueuedProcessGroup::StopQueue() {
  queue_->Stop();
  postmortem_->Detach();
}

void QueuedProcessGroup::CheckTensor(CollectiveKind kind, const Tensor& t) const {
  CheckCpuCollectiveTensor(kind, options_.backend, t);
}

std::shared_ptr<Work> QueuedProcessGroup::AllReduce(const Tensor& tensor, ReduceOp op) {
  CheckTensor(CollectiveKind::kAllReduce, tensor);
  return IssueAllReduce(CollectiveSpec::AllReduce(tensor, op), tensor, op);
}

std::shared_ptr<Work> QueuedProcessGroup::Broadcast(const Tensor& tensor, int root) {
  CheckTensor(CollectiveKind::kBroadcast, tensor);
  CheckCollectiveRoot("Broadcast", root, size_);
  return IssueBroadcast(CollectiveSpec::Broadcast(tensor, root), tensor, root);
}

std::shared_ptr<Work> QueuedProcessGroup::AllGather(const std::vector<Tensor>& outputs, const Tensor& input) {
  CheckTensor(CollectiveKind::kAllGather, input);
  CheckCollectiveList("AllGather", "outputs", outputs, size_, input);
  for (const Tensor& out : outputs) CheckTensor(CollectiveKind::kAllGather, out);
  return IssueAllGather(CollectiveSpec::AllGather(input), outputs, input);
}

std::shared_ptr<Work> QueuedProcessGroup::ReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                                        ReduceOp op) {
  CheckTensor(CollectiveKind::kReduceScatter, output);
  CheckCollectiveList("ReduceScatter", "inputs", inputs, size_, output);
  for (const Tensor& in : inputs) CheckTensor(CollectiveKind::kReduceScatter, in);
  return IssueReduceScatter(CollectiveSpec::ReduceScatter(output, op), output, inputs, op);
}

std::shared_ptr<Work> QueuedProcessGroup::Reduce(const Tensor& tensor, int root, ReduceOp op) {
  CheckTensor(CollectiveKind::kReduce, tensor);
  CheckCollectiveRoot("Reduce", root, size_);
  return IssueReduce(CollectiveSpec::Reduce(tensor, root, op), tensor, root, op);
}

std::shared_ptr<Work> QueuedProcessGroup::Barrier() { return IssueBarrier(CollectiveSpec::Barrier()); }

std::shared_ptr<Work> QueuedProcessGroup::Gather(const std::vector<Tensor>& outputs, const Tensor& input, int root) {
  CheckTensor(CollectiveKind::kGather, input);
  CheckCollectiveRoot("Gather", root, size_);
  if (rank_ == root) {
    CheckCollectiveList("Gather", "outputs", outputs, size_, input);
    for (const Tensor& out : outputs) CheckTensor(CollectiveKind::kGather, out);
  }
  return IssueGather(CollectiveSpec::Gather(input, root), outputs, input, root);
}

std::shared_ptr<Work> QueuedProcessGroup::Scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root) {
  CheckTensor(CollectiveKind::kScatter, output);
  CheckCollectiveRoot("Scatter", root, size_);
  if (rank_ == root) {
    CheckCollectiveList("Scatter", "inputs", inputs, size_, output);
    for (const Tensor& in : inputs) CheckTensor(CollectiveKind::kScatter, in);
  }
  return IssueScatter(CollectiveSpec::Scatter(output, root), output, inputs, root);
}

std::shared_ptr<Work> QueuedProcessGroup::AllToAll(const std::vector<Tensor>& outputs,
                                                   const std::vector<Tensor>& inputs) {
  DDP_CHECK(!inputs.empty()) << "AllToAll: no inputs";
  CheckCollectiveList("AllToAll", "inputs", inputs, size_, inputs[0]);
  CheckCollectiveList("AllToAll", "outputs", outputs, size_, inputs[0]);
  for (const Tensor& in : inputs) CheckTensor(CollectiveKind::kAllToAll, in);
  for (const Tensor& out : outputs) CheckTensor(CollectiveKind::kAllToAll, out);
  return IssueAllToAll(CollectiveSpec::AllToAll(inputs[0]), outputs, inputs);
}

std::shared_ptr<Work> QueuedProcessGroup::IssueGather(const CollectiveSpec&, const std::vector<Tensor>& outputs,
                                                      const Tensor& input, int root) {
  return ProcessGroup::Gather(outputs, input, root);
}

std::shared_ptr<Work> QueuedProcessGroup::IssueScatter(const CollectiveSpec&, const Tensor& output,
                                                       const std::vector<Tensor>& inputs, int root) {
  return ProcessGroup::Scatter(output, inputs, root);
}

std::shared_ptr<Work> QueuedProcessGroup::IssueAllToAll(const CollectiveSpec&, const std::vector<Tensor>& outputs,
                                                        const std::vector<Tensor>& inputs) {
  return ProcessGroup::AllToAll(outputs, inputs);
}

void QueuedProcessGroup::OnFailure(const absl::Status&) {}

std::shared_ptr<QueuedWork> QueuedProcessGroup::NewWork(const CollectiveSpec& spec, uint64_t sequence,
                                                        bool waiter_may_run) {
  return std::make_shared<QueuedWork>(*this, spec, sequence, waiter_may_run);
}

uint64_t QueuedProcessGroup::calls_issued() const {
  absl::MutexLock lock(&recorder_->mu());
  return next_sequence_;
}

uint64_t QueuedProcessGroup::TakeSequence(bool numbered) { return numbered ? next_sequence_++ : kUnnumbered; }

std::shared_ptr<QueuedWork> QueuedProcessGroup::NewRecordedWork(const CollectiveSpec& spec, bool numbered,
                                                                bool waiter_may_run) {
  std::shared_ptr<QueuedWork> work = NewWork(spec, TakeSequence(numbered), waiter_may_run);
  recorder_->Record(work->sequence(), spec, work);
  return work;
}

std::shared_ptr<Work> QueuedProcessGroup::Issue(const CollectiveSpec& spec, Body body,
                                                QueuedIssueOptions options) {
  return IssueStarted(spec, [&body] { return std::move(body); }, options);
}

std::shared_ptr<Work> QueuedProcessGroup::IssueStarted(const CollectiveSpec& spec, absl::FunctionRef<Body()> start,
                                                       QueuedIssueOptions options) {
  absl::MutexLock lock(&recorder_->mu());
  std::shared_ptr<QueuedWork> work =
      NewRecordedWork(spec, options.numbered, options_.waiter_runs_work && options.waiter_may_run);
  QueuedWork* raw = work.get();
  queue_->Enqueue(work, [this, raw, body = start()] { return Guarded(*raw, body); });
  return work;
}

absl::Status QueuedProcessGroup::Refused(const QueuedWork& work) const {
  return absl::Status(broken_.code(), absl::StrCat(work.description(), " not run: the group failed before (",
                                                   broken_.message(), ")"));
}

void QueuedProcessGroup::Break(const QueuedWork& work, const absl::Status& failure) {
  broken_ = failure;
  OnFailure(failure);
  postmortem_->Dump(std::string(failure.message()), &work);  // after OnFailure: the peers hear of it first
}

std::shared_ptr<QueuedWork> QueuedProcessGroup::TryBeginInline(const CollectiveSpec& spec) {
  absl::MutexLock lock(&recorder_->mu());
  if (!queue_->TryBeginInline()) return nullptr;
  return NewRecordedWork(spec, /*numbered=*/true, /*waiter_may_run=*/false);
}

void QueuedProcessGroup::EndInline(std::shared_ptr<QueuedWork> work, Body rest) {
  QueuedWork* raw = work.get();
  queue_->EndInline(std::move(work), [this, raw, rest = std::move(rest)] { return Guarded(*raw, rest); });
}

}  // namespace ddp
