#include "comm/shm/process_group_shm.h"

#include <algorithm>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "comm/reduce_functions.h"
#include "comm/shm/call_stamp.h"
#include "comm/rendezvous_checks.h"
#include "base/wall_clock.h"
#include "base/check.h"

// Every collective here is a sequence of steps of the protocol in Note [Shared-memory protocol]
// (comm/shm/shm_channel.cc). Each rank computes the same chunking from the same shapes and slot size, so
// every rank takes the same step numbers.

namespace ddp {
namespace {

char* Bytes(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

// A thread in Wait counts itself in the channel's ShmWaiters, so the group's waits spin instead of
// sleeping while it is blocked (Note [Spinning while the process waits] in comm/shm/shm_channel.cc). A
// queued Work's waiter runs it when it is next and nothing runs (Note [Waiter runs the work] in
// comm/gloo/process_group_gloo.cc): blocking is harmless there, and it saves the two thread hand-offs.
class ShmWork final : public QueuedWork {
 public:
  ShmWork(const QueuedProcessGroup& group, const CollectiveSpec& spec, uint64_t sequence, bool waiter_may_run,
          std::shared_ptr<ShmWaiters> waiters)
      : QueuedWork(group, spec, sequence, waiter_may_run), waiters_(std::move(waiters)) {}
  absl::Status Wait(absl::Duration timeout) override {
    if (IsCompleted()) return AsyncWork::Wait(timeout);  // no need to hurry the group (nor wake its worker)
    waiters_->Begin();
    absl::Cleanup end = [this] { waiters_->End(); };
    return QueuedWork::Wait(timeout);
  }

 private:
  const std::shared_ptr<ShmWaiters> waiters_;
};

// What the queued skeleton needs of the group's options.
QueuedProcessGroupOptions QueuedGroupOptionsOf(const ProcessGroupShmOptions& options) {
  QueuedProcessGroupOptions queued;
  queued.backend = "shm";
  queued.timeout = options.timeout;
  queued.waiter_runs_work = true;  // Note [Waiter runs the work]
  return queued;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroupShm>> ProcessGroupShm::Create(Store& store, int rank, int size,
                                                                          const ProcessGroupShmOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("shm: rank ", rank, " is outside a group of ", size));
  }
  if (absl::Status same = CheckSameWorldSize(store, rank, size); !same.ok()) {
    return absl::Status(same.code(), absl::StrCat("shm: rank ", rank, " of ", size, " cannot join: ", same.message()));
  }
  ShmChannelOptions channel_options = options.channel;
  channel_options.rendezvous_timeout = options.timeout;
  absl::StatusOr<std::unique_ptr<ShmChannel>> channel = ShmChannel::Create(store, rank, size, channel_options);
  if (!channel.ok()) {
    absl::Status failed(channel.status().code(),
                        absl::StrCat("shm: rank ", rank, " of ", size, " could not join: ", channel.status().message()));
    if (IsShmSegmentUnavailable(channel.status())) MarkShmSegmentUnavailable(failed);
    return failed;
  }
  return std::unique_ptr<ProcessGroupShm>(new ProcessGroupShm(*std::move(channel), options));
}

ProcessGroupShm::ProcessGroupShm(std::unique_ptr<ShmChannel> channel, ProcessGroupShmOptions options)
    : QueuedProcessGroup(channel->rank(), channel->size(), QueuedGroupOptionsOf(options)),
      channel_(std::move(channel)),
      options_(std::move(options)) {}

ProcessGroupShm::~ProcessGroupShm() { StopQueue(); }  // before the members its tasks use go

std::shared_ptr<QueuedWork> ProcessGroupShm::NewWork(const CollectiveSpec& spec, uint64_t sequence,
                                                     bool waiter_may_run) {
  return std::make_shared<ShmWork>(*this, spec, sequence, waiter_may_run, channel_->waiters());
}

void ProcessGroupShm::OnFailure(const absl::Status&) {
  channel_->Abort(-1);  // keeps the lost rank a peer already named; else says "broken"
}

// Note [Inline collectives]
// Handing a small all-reduce to the worker thread and waking the caller again costs two thread
// switches, several microseconds, more than the protocol itself. So when the queue is idle (nothing
// queued, nothing running) and the message fits inline_allreduce_bytes and one slot, the caller takes
// the queue's turn (QueuedProcessGroup::TryBeginInline) and runs the all-reduce itself; collectives issued
// meanwhile by other threads queue behind it, so issue order holds and step_ and the broken state have
// one user at a time. The caller must not block, though: Work is asynchronous, and a rank that blocked
// on a peer that first waits for a collective of another group from this rank would deadlock. So the
// inline attempt never sleeps: at each wait of the protocol it spins at most channel.spin, and if a peer
// is not there yet it hands the all-reduce, at the phase it reached (ChunkAllReduce), to the worker, at
// the front of the queue (QueuedProcessGroup::EndInline), and returns a pending Work. The Work completes
// before the turn is given back, so completion order is issue order as well.

std::shared_ptr<Work> ProcessGroupShm::TryAllReduceInline(const CollectiveSpec& spec, const Tensor& tensor,
                                                          ReduceOp op) {
  std::shared_ptr<QueuedWork> work = TryBeginInline(spec);
  if (work == nullptr) return nullptr;
  const absl::Time started = WallNow();  // given to Complete: one locked section, not two
  ChunkAllReduce chunk{Bytes(tensor), static_cast<size_t>(spec.numel), spec.dtype, op};
  bool done = false;
  absl::Status status = Guarded(
      *work,
      [&](const RunningCall& call) {
        chunk.call = StampCall(call);
        absl::StatusOr<bool> advanced = AdvanceAllReduceChunk(chunk, /*blocking=*/false, call);
        if (!advanced.ok()) return advanced.status();
        done = *advanced;
        return absl::OkStatus();
      },
      /*blocking=*/false);
  if (status.ok() && !done) {
    // `tensor` rides along to keep chunk.data alive until the worker finishes the all-reduce.
    EndInline(work, [this, chunk, tensor](const RunningCall& call) mutable {
      return AdvanceAllReduceChunk(chunk, /*blocking=*/true, call).status();
    });
    return work;
  }
  work->Complete(status, started);
  EndInline();
  return work;
}

ShmCallStamp ProcessGroupShm::StampCall(const RunningCall& call) {
  return history_.Stamp(call.work->spec(), call.work->sequence());
}

absl::Status ProcessGroupShm::CallMismatch(int peer, uint32_t step, const ShmCallStamp& mine, const RunningCall& call) {
  return CallMismatchError(call(), rank(), size(), mine, peer, channel_->InputCallRecord(peer, step));
}

absl::Status ProcessGroupShm::WaitInput(int peer, ShmWord word, uint32_t step, const ShmCallStamp& mine,
                                        const RunningCall& call) {
  absl::Status waited = channel_->Wait(peer, word, step, call.deadline, call);
  if (!waited.ok()) {
    if (PeerPostedInputElsewhere(waited) == peer) return CallMismatch(peer, step, mine, call);
    return waited;
  }
  if (channel_->InputStamp(peer, word, step) != mine.stamp) return CallMismatch(peer, step, mine, call);
  return absl::OkStatus();
}

absl::Status ProcessGroupShm::WaitInputs(ShmWord word, uint32_t step, const ShmCallStamp& mine,
                                         const RunningCall& call) {
  for (int q = 0; q < size(); ++q) {
    if (q != rank()) DDP_RETURN_IF_ERROR(WaitInput(q, word, step, mine, call));
  }
  return absl::OkStatus();
}

absl::Status ProcessGroupShm::ReduceSlots(char* out, size_t offset_bytes, size_t count, DType dtype, ReduceOp op,
                                          uint32_t step, InputPlace place, const char* own, char* also_out) {
  const size_t bytes = count * ElementSize(dtype);
  absl::InlinedVector<const void*, 8> inputs(size());
  for (int q = 0; q < size(); ++q) {
    if (q == rank() && own != nullptr) {
      inputs[q] = own;
    } else if (place == InputPlace::kSlot) {
      inputs[q] = channel_->Slot(q, step) + offset_bytes;
    } else if (place == InputPlace::kInline) {
      inputs[q] = channel_->InlineInput(q, step) + offset_bytes;
    } else {
      DDP_ASSIGN_OR_RETURN(inputs[q], channel_->Input(q, step, offset_bytes, bytes));
    }
  }
  if (size() == 1) {
    if (out != inputs[0]) std::memcpy(out, inputs[0], bytes);
    if (also_out != nullptr && also_out != inputs[0]) std::memcpy(also_out, inputs[0], bytes);
    return absl::OkStatus();
  }
  const FusedDivide divide{dtype, size()};
  ReduceInputs(GetReduceFunction(dtype, op), ElementSize(dtype), out, also_out, inputs.data(), size(), count,
               op == ReduceOp::kAvg ? &divide : nullptr);
  return absl::OkStatus();
}

absl::Status ProcessGroupShm::RunAllReduce(const Tensor& tensor, ReduceOp op, const RunningCall& call) {
  const ShmCallStamp stamp = StampCall(call);
  if (size() == 1 || tensor.numel() == 0) return absl::OkStatus();
  const size_t element = ElementSize(tensor.dtype());
  const size_t chunk = channel_->slot_bytes() / element;
  const size_t count = tensor.numel();
  for (size_t begin = 0; begin < count; begin += chunk) {
    ChunkAllReduce part{Bytes(tensor) + begin * element, std::min(chunk, count - begin), tensor.dtype(), op};
    part.call = stamp;
    DDP_RETURN_IF_ERROR(AdvanceAllReduceChunk(part, /*blocking=*/true, call).status());
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ProcessGroupShm::AdvanceAllReduceChunk(ChunkAllReduce& chunk, bool blocking,
                                                            const RunningCall& call) {
  if (chunk.count * ElementSize(chunk.dtype) <= options_.small_allreduce_bytes) {
    return AdvanceOneShotAllReduce(chunk, blocking, call);
  }
  return AdvanceTwoShotAllReduce(chunk, blocking, call);
}

absl::Status ProcessGroupShm::RunBroadcast(const Tensor& tensor, int root, const RunningCall& call) {
  const ShmCallStamp stamp = StampCall(call);
  if (size() == 1) return absl::OkStatus();
  const size_t bytes = tensor.nbytes();
  const size_t chunk = channel_->slot_bytes();
  for (size_t begin = 0; begin < bytes; begin += chunk) {
    const size_t n = std::min(chunk, bytes - begin);
    const uint32_t step = NextStep();
    if (rank() == root) {
      DDP_RETURN_IF_ERROR(channel_->WaitSlotFree(step, call.deadline, call));
      std::memcpy(channel_->Slot(root, step), Bytes(tensor) + begin, n);
      channel_->PostInput(ShmWord::kReady, step, stamp);
    } else {
      // No input, but the stamp: a peer that waits for this rank's input at this step (another call)
      // finds the mismatch too (Note [Call stamps]). The stamp is reused two steps later, like the slot.
      DDP_RETURN_IF_ERROR(channel_->WaitSlotFree(step, call.deadline, call));
      channel_->PostInput(ShmWord::kReady, step, stamp);
      DDP_RETURN_IF_ERROR(WaitInput(root, ShmWord::kReady, step, stamp, call));
      std::memcpy(Bytes(tensor) + begin, channel_->Slot(root, step), n);
    }
    channel_->Post(ShmWord::kDone, step);
  }
  return absl::OkStatus();
}

absl::Status ProcessGroupShm::RunAllGather(const std::vector<Tensor>& outputs, const Tensor& input,
                                           const RunningCall& call) {
  const ShmCallStamp stamp = StampCall(call);
  const size_t bytes = input.nbytes();
  if (size() == 1) {
    if (bytes > 0) std::memcpy(Bytes(outputs[0]), Bytes(input), bytes);
    return absl::OkStatus();
  }
  const size_t chunk = channel_->slot_bytes();
  for (size_t begin = 0; begin < bytes; begin += chunk) {
    const size_t n = std::min(chunk, bytes - begin);
    const uint32_t step = NextStep();
    DDP_RETURN_IF_ERROR(channel_->WaitSlotFree(step, call.deadline, call));
    std::memcpy(channel_->Slot(rank(), step), Bytes(input) + begin, n);
    channel_->PostInput(ShmWord::kReady, step, stamp);
    for (int q = 0; q < size(); ++q) {
      if (q != rank()) DDP_RETURN_IF_ERROR(WaitInput(q, ShmWord::kReady, step, stamp, call));
      std::memcpy(Bytes(outputs[q]) + begin, channel_->Slot(q, step), n);
    }
    channel_->Post(ShmWord::kDone, step);
  }
  return absl::OkStatus();
}

absl::Status ProcessGroupShm::RunReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                               const RunningCall& call) {
  const ShmCallStamp stamp = StampCall(call);
  const size_t element = ElementSize(output.dtype());
  const size_t count = output.numel();
  // Each step carries `chunk` elements of every destination rank's part, destination c at c * chunk.
  const size_t chunk = channel_->slot_bytes() / element / size();
  for (size_t begin = 0; begin < count; begin += chunk) {
    const size_t n = std::min(chunk, count - begin);
    const uint32_t step = NextStep();
    DDP_RETURN_IF_ERROR(channel_->WaitSlotFree(step, call.deadline, call));
    for (int c = 0; c < size(); ++c) {
      std::memcpy(channel_->Slot(rank(), step) + c * n * element, Bytes(inputs[c]) + begin * element, n * element);
    }
    channel_->PostInput(ShmWord::kReady, step, stamp);
    DDP_RETURN_IF_ERROR(WaitInputs(ShmWord::kReady, step, stamp, call));
    DDP_RETURN_IF_ERROR(ReduceSlots(Bytes(output) + begin * element, rank() * n * element, n, output.dtype(), op,
                                    step, InputPlace::kSlot));
    channel_->Post(ShmWord::kDone, step);
  }
  return absl::OkStatus();
}

absl::Status ProcessGroupShm::RunReduce(const Tensor& tensor, int root, ReduceOp op, const RunningCall& call) {
  const ShmCallStamp stamp = StampCall(call);
  if (size() == 1 || tensor.numel() == 0) return absl::OkStatus();
  const size_t element = ElementSize(tensor.dtype());
  const size_t chunk = channel_->slot_bytes() / element;
  const size_t count = tensor.numel();
  for (size_t begin = 0; begin < count; begin += chunk) {
    const size_t n = std::min(chunk, count - begin);
    const uint32_t step = NextStep();
    DDP_RETURN_IF_ERROR(channel_->WaitSlotFree(step, call.deadline, call));
    std::memcpy(channel_->Slot(rank(), step), Bytes(tensor) + begin * element, n * element);
    channel_->PostInput(ShmWord::kReady, step, stamp);
    if (rank() == root) {
      DDP_RETURN_IF_ERROR(WaitInputs(ShmWord::kReady, step, stamp, call));
      DDP_RETURN_IF_ERROR(
          ReduceSlots(Bytes(tensor) + begin * element, 0, n, tensor.dtype(), op, step, InputPlace::kSlot));
    }
    channel_->Post(ShmWord::kDone, step);
  }
  return absl::OkStatus();
}

absl::Status ProcessGroupShm::RunBarrier(const RunningCall& call) {
  const ShmCallStamp stamp = StampCall(call);
  if (size() == 1) return absl::OkStatus();
  const uint32_t step = NextStep();
  DDP_RETURN_IF_ERROR(channel_->WaitSlotFree(step, call.deadline, call));  // the stamp's, as a slot's
  channel_->PostInput(ShmWord::kReady, step, stamp);
  DDP_RETURN_IF_ERROR(WaitInputs(ShmWord::kReady, step, stamp, call));
  channel_->Post(ShmWord::kDone, step);
  return absl::OkStatus();
}

Tensor ProcessGroupShm::NewCommBuffer(int64_t numel, DType dtype, Device device) {
  const std::shared_ptr<ShmHeap>& heap = channel_->heap();
  const size_t bytes = static_cast<size_t>(numel) * ElementSize(dtype);
  if (heap == nullptr || !device.is_cpu() || bytes == 0) return ProcessGroup::NewCommBuffer(numel, dtype, device);
  absl::StatusOr<char*> block = heap->Allocate(bytes);
  if (!block.ok()) return ProcessGroup::NewCommBuffer(numel, dtype, device);  // heap full: staged, still correct
  Storage storage = std::make_shared<StorageImpl>(*block, bytes, device,
                                                  [heap](void* data) { heap->Free(static_cast<char*>(data)); });
  return Tensor::View(std::move(storage), {numel}, {1}, 0, dtype);
}

std::shared_ptr<Work> ProcessGroupShm::IssueAllReduce(const CollectiveSpec& spec, const Tensor& tensor, ReduceOp op) {
  const size_t bytes = static_cast<size_t>(spec.numel) * ElementSize(spec.dtype);
  if (size() > 1 && bytes > 0 && bytes <= options_.inline_allreduce_bytes && bytes <= channel_->slot_bytes()) {
    if (std::shared_ptr<Work> work = TryAllReduceInline(spec, tensor, op)) return work;
  }
  return Issue(spec, [this, tensor, op](const RunningCall& call) { return RunAllReduce(tensor, op, call); });
}

std::shared_ptr<Work> ProcessGroupShm::IssueBroadcast(const CollectiveSpec& spec, const Tensor& tensor, int root) {
  return Issue(spec, [this, tensor, root](const RunningCall& call) { return RunBroadcast(tensor, root, call); });
}

std::shared_ptr<Work> ProcessGroupShm::IssueAllGather(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                                      const Tensor& input) {
  return Issue(spec,
               [this, outputs, input](const RunningCall& call) { return RunAllGather(outputs, input, call); });
}

std::shared_ptr<Work> ProcessGroupShm::IssueReduceScatter(const CollectiveSpec& spec, const Tensor& output,
                                                          const std::vector<Tensor>& inputs, ReduceOp op) {
  return Issue(spec, [this, output, inputs, op](const RunningCall& call) {
    return RunReduceScatter(output, inputs, op, call);
  });
}

std::shared_ptr<Work> ProcessGroupShm::IssueReduce(const CollectiveSpec& spec, const Tensor& tensor, int root,
                                                   ReduceOp op) {
  return Issue(spec,
               [this, tensor, root, op](const RunningCall& call) { return RunReduce(tensor, root, op, call); });
}

std::shared_ptr<Work> ProcessGroupShm::IssueBarrier(const CollectiveSpec& spec) {
  return Issue(spec, [this](const RunningCall& call) { return RunBarrier(call); });
}

}  // namespace ddp
