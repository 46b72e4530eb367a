// ProcessGroupShm's two-shot all-reduce: used for every chunk above options.small_allreduce_bytes (32 KiB
// by default). A reduce-scatter then an all-gather: rank r reduces only slice r of every rank's input
// (1/size of the arithmetic and of the reads), then each rank gathers the others' reduced slices. Each
// rank's input is read where the rank published it: its slot (copied there), or in place in its shared
// heap for tensors from NewCommBuffer (Note [Zero-copy all-reduce]); when every rank's input is in its
// heap, each rank pushes its reduced slice into the peers' tensors instead and nobody gathers (Note
// [Pushing the reduced slices]). Smaller chunks take the one-shot algorithm (comm/shm/allreduce_one_shot.cc).
//
// Note [Zero-copy all-reduce]
// A two-shot all-reduce of an ordinary tensor copies each rank's input into its slot so that the peers
// can read it: for DDP's buckets that copy is a third of the all-reduce's memory traffic, on the cores
// that also run the backward pass. A tensor from NewCommBuffer lives in this rank's ShmHeap (a memfd
// every peer maps, comm/shm/shm_heap.h), so the rank publishes the input's heap offset with the step
// (ShmChannel::PublishInput) instead of copying it, and the peers read it in place:
//   * rank r reduces slice r of every input into slice r of its own tensor (in place; no peer reads
//     slice r of rank r's input), posts kReduced, and the peers gather slice r from there;
//   * slice q of rank r's tensor is overwritten (gathered from q) only after q posted kReduced, that is
//     after q read it;
//   * rank r's Work completes only once every peer posted kDone for the step (kAwaitPeersDone): until
//     then a peer may still gather slice r, and the caller may overwrite the tensor once the Work is done.
// The choice is each rank's, per chunk (a rank whose tensor is not in its heap copies it into its slot;
// readers follow what each rank published), so ranks that mix heap and ordinary tensors still agree.
// Chunks below options.zero_copy_min_bytes keep the copy: it is cheaper than the final wait.
//
// Note [Pushing the reduced slices]
// When every rank's input of a chunk lies in its heap (all ranks see the same published records, so all
// choose alike), rank r writes its reduced slice r into every peer's tensor as well as its own, in the
// same pass over L1-sized blocks that reduces it, and the gather is gone: rank r reads only slice r of
// each tensor and writes only slice r, so no two ranks touch the same bytes; r posts kReduced and kDone
// at once, and its Work completes when every peer posted kDone, i.e. finished writing into r's tensor.
// Each rank then reads the peers' inputs once and writes its slice once per peer, where the gather reads
// every peer's slice again after a second hand-off: with the floor program (bench/shm_floor.h) at world
// 2, 1-4 MiB take 0.45-0.75x the gather's time.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "base/check.h"
#include "comm/shm/process_group_shm.h"

namespace ddp {
namespace {

// Rank r's slice [begin, end) of `count` elements: equal parts of whole cache lines (64 bytes), the last
// one shorter.
std::pair<size_t, size_t> Slice(size_t count, size_t element_size, int size, int r) {
  const size_t line = std::max<size_t>(1, 64 / element_size);
  size_t per = (count + size - 1) / size;
  per = (per + line - 1) / line * line;
  const size_t begin = std::min(count, per * r);
  return {begin, std::min(count, begin + per)};
}

}  // namespace

absl::StatusOr<bool> ProcessGroupShm::AdvanceTwoShotAllReduce(ChunkAllReduce& c, bool blocking,
                                                              const RunningCall& call) {
  while (c.phase != AllReducePhase::kDone) {
    absl::StatusOr<bool> moved = true;
    switch (c.phase) {
      case AllReducePhase::kPostInput:
        moved = PostTwoShotInput(c, blocking, call);
        break;
      case AllReducePhase::kReduce:
        moved = ReduceOwnSlice(c, blocking, call);
        break;
      case AllReducePhase::kGather:
        moved = GatherSlices(c, blocking, call);
        break;
      case AllReducePhase::kAwaitPeersDone:
        moved = AwaitPeersDone(c, blocking, call);
        break;
      case AllReducePhase::kDone:
        break;
    }
    if (!moved.ok() || !*moved) return moved;
  }
  return true;
}

absl::StatusOr<bool> ProcessGroupShm::PostTwoShotInput(ChunkAllReduce& c, bool blocking, const RunningCall& call) {
  const size_t element = ElementSize(c.dtype);
  if (c.step == 0) c.step = NextStep();
  if (!blocking && !channel_->TrySlotFree(c.step)) return false;
  DDP_RETURN_IF_ERROR(channel_->WaitSlotFree(c.step, call.deadline, call));
  const bool may_share = channel_->heap() != nullptr && c.count * element >= options_.zero_copy_min_bytes;
  const int64_t heap_offset = may_share ? channel_->heap()->OffsetOf(c.data, c.count * element) : -1;
  c.in_heap = heap_offset >= 0;
  channel_->PublishInput(c.step, heap_offset);
  if (!c.in_heap) {
    // Only this rank reads its own slice of its input: it reads it from c.data, so it skips the copy.
    char* slot = channel_->Slot(rank(), c.step);
    const auto [begin, end] = Slice(c.count, element, size(), rank());
    std::memcpy(slot, c.data, begin * element);
    std::memcpy(slot + end * element, c.data + end * element, (c.count - end) * element);
  }
  channel_->PostInput(ShmWord::kReady, c.step, c.call);
  c.phase = AllReducePhase::kReduce;
  return true;
}

absl::StatusOr<bool> ProcessGroupShm::ReduceOwnSlice(ChunkAllReduce& c, bool blocking, const RunningCall& call) {
  if (!blocking && !channel_->TrySpinAll(ShmWord::kReady, c.step)) return false;
  DDP_RETURN_IF_ERROR(WaitInputs(ShmWord::kReady, c.step, c.call, call));
  if (c.in_heap && channel_->AllInputsInHeap(c.step)) {
    DDP_RETURN_IF_ERROR(PushReducedSlice(c));
    c.phase = AllReducePhase::kAwaitPeersDone;  // until every peer has written its slice into this tensor
    return true;
  }
  const size_t element = ElementSize(c.dtype);
  const auto [begin, end] = Slice(c.count, element, size(), rank());
  char* own = c.data + begin * element;
  // Reduced at once into this rank's output and (unless the peers gather it from the heap) into its
  // slot, whose slice r holds nothing yet: one pass (Note [Blocked reduction]).
  char* also_out = c.in_heap ? nullptr : channel_->Slot(rank(), c.step) + begin * element;
  DDP_RETURN_IF_ERROR(ReduceSlots(own, begin * element, end - begin, c.dtype, c.op, c.step, InputPlace::kPublished,
                                  /*own=*/own, also_out));
  channel_->Post(ShmWord::kReduced, c.step);
  c.phase = AllReducePhase::kGather;
  return true;
}

absl::Status ProcessGroupShm::PushReducedSlice(ChunkAllReduce& c) {
  const size_t element = ElementSize(c.dtype);
  const auto [begin, end] = Slice(c.count, element, size(), rank());
  char* own = c.data + begin * element;
  const size_t bytes = (end - begin) * element;
  absl::InlinedVector<char*, 8> peers;
  for (int q = 0; q < size(); ++q) {
    if (q == rank()) continue;
    DDP_ASSIGN_OR_RETURN(char* at, channel_->HeapInputToWrite(q, c.step, begin * element, bytes));
    peers.push_back(at);
  }
  DDP_RETURN_IF_ERROR(ReduceSlots(own, begin * element, end - begin, c.dtype, c.op, c.step, InputPlace::kPublished,
                                  /*own=*/own, /*also_out=*/peers[0]));
  for (size_t i = 1; i < peers.size(); ++i) std::memcpy(peers[i], own, bytes);
  channel_->Post(ShmWord::kReduced, c.step);
  channel_->Post(ShmWord::kDone, c.step);
  return absl::OkStatus();
}

absl::StatusOr<bool> ProcessGroupShm::GatherSlices(ChunkAllReduce& c, bool blocking, const RunningCall& call) {
  const size_t element = ElementSize(c.dtype);
  // Gathering a slice twice (a resumed attempt) copies the same bytes again: harmless.
  for (int q = 0; q < size(); ++q) {
    if (q == rank()) continue;
    if (!blocking && !channel_->TrySpin(q, ShmWord::kReduced, c.step)) return false;
    DDP_RETURN_IF_ERROR(channel_->Wait(q, ShmWord::kReduced, c.step, call.deadline, call));
    const auto [begin, end] = Slice(c.count, element, size(), q);
    DDP_ASSIGN_OR_RETURN(const char* slice, channel_->Input(q, c.step, begin * element, (end - begin) * element));
    std::memcpy(c.data + begin * element, slice, (end - begin) * element);
  }
  channel_->Post(ShmWord::kDone, c.step);
  c.phase = AllReducePhase::kAwaitPeersDone;
  return true;
}

absl::StatusOr<bool> ProcessGroupShm::AwaitPeersDone(ChunkAllReduce& c, bool blocking, const RunningCall& call) {
  // The peers may still be gathering this rank's slice from its heap, or writing theirs into it.
  if (c.in_heap) {
    if (!blocking && !channel_->TrySpinAll(ShmWord::kDone, c.step)) return false;
    DDP_RETURN_IF_ERROR(channel_->WaitAll(ShmWord::kDone, c.step, call.deadline, call));
  }
  c.phase = AllReducePhase::kDone;
  return true;
}

}  // namespace ddp
