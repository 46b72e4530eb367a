// ProcessGroupShm's one-shot all-reduce: used for every chunk of at most options.small_allreduce_bytes
// (32 KiB by default), whatever tensor it comes from. Every rank posts its whole input and reduces every
// rank's input itself, so the all-reduce is one exchange: at these sizes a second hand-off would cost more
// than the size-1 extra reductions it saves. Inputs of at most ShmChannel::kInlineBytes travel in the
// ranks' inline areas, next to the step word, so a peer's one cache miss brings both (Note [Shared-memory
// protocol] in comm/shm/shm_channel.cc); larger ones in the slots. Chunks above the threshold take the
// two-shot algorithm (comm/shm/allreduce_two_shot.cc).
#include <cstring>

#include "base/check.h"
#include "comm/shm/process_group_shm.h"

namespace ddp {

absl::StatusOr<bool> ProcessGroupShm::AdvanceOneShotAllReduce(ChunkAllReduce& c, bool blocking,
                                                              const RunningCall& call) {
  const size_t bytes = c.count * ElementSize(c.dtype);
  const bool in_line = bytes <= ShmChannel::kInlineBytes;
  const ShmWord ready = in_line ? ShmWord::kInlineReady : ShmWord::kReady;
  if (c.phase == AllReducePhase::kPostInput) {
    if (c.step == 0) c.step = NextStep();
    if (!blocking && !channel_->TrySlotFree(c.step)) return false;
    DDP_RETURN_IF_ERROR(channel_->WaitSlotFree(c.step, call.deadline, call));
    char* input = in_line ? channel_->InlineInput(rank(), c.step) : channel_->Slot(rank(), c.step);
    std::memcpy(input, c.data, bytes);
    channel_->PostInput(ready, c.step, c.call);
    c.phase = AllReducePhase::kReduce;
  }
  // kReduce
  if (!blocking && !channel_->TrySpinAll(ready, c.step)) return false;
  DDP_RETURN_IF_ERROR(WaitInputs(ready, c.step, c.call, call));
  DDP_RETURN_IF_ERROR(ReduceSlots(c.data, 0, c.count, c.dtype, c.op, c.step,
                                  in_line ? InputPlace::kInline : InputPlace::kSlot));
  channel_->Post(ShmWord::kDone, c.step);
  c.phase = AllReducePhase::kDone;
  return true;
}

}  // namespace ddp
