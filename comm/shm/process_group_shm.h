// ProcessGroupShm: the intra-node CPU backend, through shared memory (ranks of one host only).
// InitProcessGroup picks it for --backend=shm, and for --backend=auto when every rank is on one host
// (comm/host_identity.h). Protocol: Note [Shared-memory protocol] in comm/shm/shm_channel.cc.
#ifndef DDP_COMM_SHM_PROCESS_GROUP_SHM_H_
#define DDP_COMM_SHM_PROCESS_GROUP_SHM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/queued_process_group.h"
#include "comm/shm/call_stamp.h"
#include "comm/shm/shm_channel.h"
#include "store/store.h"

namespace ddp {

struct ProcessGroupShmOptions {
  // Bound on the rendezvous and on every collective (PyTorch's default process-group timeout).
  absl::Duration timeout = absl::Seconds(300);
  // All-reduces of at most this many bytes per chunk: every rank reduces every input (one exchange,
  // comm/shm/allreduce_one_shot.cc); larger chunks: each rank reduces its slice and gathers the others'
  // (two exchanges, 1/size of the arithmetic each, comm/shm/allreduce_two_shot.cc).
  size_t small_allreduce_bytes = size_t{32} << 10;
  // All-reduces of at most this many bytes (and one slot) run on the calling thread when nothing is
  // queued (Note [Inline collectives] in process_group_shm.cc); 0 turns the inline path off.
  size_t inline_allreduce_bytes = size_t{64} << 10;
  // Chunks of at least this many bytes of a NewCommBuffer tensor are read in place (Note [Zero-copy
  // all-reduce]); smaller ones are copied, which is cheaper than the wait for the peers at the end
  // (measured: 64 KiB 14 -> 21 us in place, 128 KiB even, 256 KiB and up faster).
  size_t zero_copy_min_bytes = size_t{128} << 10;
  // Segments, waiting and liveness checks (slot size, spin, check interval, segment name tag). Its
  // rendezvous_timeout is replaced by `timeout`. REQUIRES: the same slot_bytes on every rank.
  ShmChannelOptions channel;
};

// Collectives on contiguous CPU tensors (float32, int64, float16, bfloat16; sum, avg, min, max,
// product) between the ranks of one host. One background worker runs the collectives in issue order,
// so every call returns at once with a Work; a small all-reduce issued while the worker is idle runs
// on the calling thread instead, which never sleeps on a peer: it spins at most channel.spin per wait
// and otherwise leaves the rest to the worker (Note [Inline collectives]). A large all-reduce of a tensor
// from NewCommBuffer is read in place by the peers instead of being copied into the slots (Note [Zero-copy
// all-reduce]); its Work completes once every peer has finished reading it (and, when every rank's tensor
// is in its heap, writing its reduced slice into it: Note [Pushing the reduced slices]). Thread-safe.
// Errors: a failed collective's Work names the collective (operation, element count, dtype, sequence
// number, rank) and, when a rank's process exited, that rank ("lost rank 2 (process 81 exited)"), within
// about channel.liveness_interval of its death. The group is then broken: later collectives fail with
// the first error. Ranks that issue different collectives (kind, reduce op, root, element count, dtype,
// or order) fail with FailedPrecondition naming both ranks' calls (Note [Call stamps] in
// comm/shm/call_stamp.h): every rank that reads a peer's input compares the peer's call with its own.
class ProcessGroupShm : public QueuedProcessGroup {
 public:
  // Rendezvous through `store` (keys under "shm/"; `store` is not kept): checks the world size, maps
  // every rank's segment. Fails with kUnavailable naming a rank that never arrived within
  // options.timeout, or one whose segment cannot be mapped (another host); on every rank alike, with
  // IsShmSegmentUnavailable (comm/shm/shm_channel.h), when a rank cannot create its segment (/dev/shm
  // too small: the error names its size and the bytes needed). REQUIRES: 0 <= rank < size.
  static absl::StatusOr<std::unique_ptr<ProcessGroupShm>> Create(Store& store, int rank, int size,
                                                                 const ProcessGroupShmOptions& options = {});
  // Pending works fail with "process group destroyed"; the running one finishes (bounded) first.
  ~ProcessGroupShm() override;

  // CPU tensors come from the group's shared heap (Note [Zero-copy all-reduce]) while it has room.
  Tensor NewCommBuffer(int64_t numel, DType dtype, Device device) override;
  bool FusesAverage() const override { return true; }  // ReduceSlots divides each block in L1
  // Why all-reduces stage through the slots on this group ("" when zero-copy is on).
  const std::string& zero_copy_off_reason() const { return channel_->zero_copy_off_reason(); }
  // Since Create: how many of this rank's waits spun past channel.spin because a thread was blocked on
  // one of the group's Works (Note [Spinning while the process waits]).
  uint64_t wait_long_spins() const { return channel_->long_spins(); }

 private:
  ProcessGroupShm(std::unique_ptr<ShmChannel> channel, ProcessGroupShmOptions options);

  // The collectives (arguments checked by QueuedProcessGroup). AllReduce tries the inline path first.
  std::shared_ptr<Work> IssueAllReduce(const CollectiveSpec& spec, const Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> IssueBroadcast(const CollectiveSpec& spec, const Tensor& tensor, int root) override;
  std::shared_ptr<Work> IssueAllGather(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                       const Tensor& input) override;
  std::shared_ptr<Work> IssueReduceScatter(const CollectiveSpec& spec, const Tensor& output,
                                           const std::vector<Tensor>& inputs, ReduceOp op) override;
  std::shared_ptr<Work> IssueReduce(const CollectiveSpec& spec, const Tensor& tensor, int root, ReduceOp op) override;
  std::shared_ptr<Work> IssueBarrier(const CollectiveSpec& spec) override;
  // The failure broke the group: tells the peers through the channel.
  void OnFailure(const absl::Status& failure) override;
  // ShmWorks: a thread in Wait makes the group's waits spin (Note [Spinning while the process waits]).
  std::shared_ptr<QueuedWork> NewWork(const CollectiveSpec& spec, uint64_t sequence, bool waiter_may_run) override;

  // Where a one-chunk all-reduce stands: the next thing it does. A resumed all-reduce (Note [Inline
  // collectives]) continues from here. The one-shot algorithm (comm/shm/allreduce_one_shot.cc) goes
  // kPostInput -> kReduce -> kDone; the two-shot one (comm/shm/allreduce_two_shot.cc) goes through all.
  enum class AllReducePhase {
    kPostInput,       // take a step, publish this rank's input and post it ready
    kReduce,          // wait for every input and reduce (one-shot: all of it; two-shot: this rank's slice)
    kGather,          // two-shot: copy each peer's reduced slice
    kAwaitPeersDone,  // two-shot, input in the heap: wait until no peer reads or writes it any more
    kDone,
  };
  // A one-chunk all-reduce in progress, so that the worker can resume one the inline path began.
  struct ChunkAllReduce {
    char* data;
    size_t count;
    DType dtype;
    ReduceOp op;
    uint32_t step = 0;  // 0: no step taken yet
    AllReducePhase phase = AllReducePhase::kPostInput;
    bool in_heap = false;  // the input is read in place from this rank's heap (Note [Zero-copy all-reduce])
    ShmCallStamp call;     // the stamp of the all-reduce it is part of (Note [Call stamps])
  };

  // The inline path of AllReduce: nullptr when it does not apply (queue busy), else a Work that is
  // complete, or whose rest was queued ahead of any later collective.
  std::shared_ptr<Work> TryAllReduceInline(const CollectiveSpec& spec, const Tensor& tensor, ReduceOp op);
  // Advances `chunk` through its algorithm (one-shot up to options.small_allreduce_bytes, else
  // two-shot). blocking: waits (bounded by call.deadline) until it is done and returns true. Not
  // blocking: spins at most channel.spin at each wait and returns false when a peer is not there yet
  // (nothing failed; call again, blocking, to finish). Each step below has this contract too, and moves
  // chunk.phase on when it completes.
  absl::StatusOr<bool> AdvanceAllReduceChunk(ChunkAllReduce& chunk, bool blocking, const RunningCall& call);
  // comm/shm/allreduce_one_shot.cc.
  absl::StatusOr<bool> AdvanceOneShotAllReduce(ChunkAllReduce& chunk, bool blocking, const RunningCall& call);
  // comm/shm/allreduce_two_shot.cc, one function per phase.
  absl::StatusOr<bool> AdvanceTwoShotAllReduce(ChunkAllReduce& chunk, bool blocking, const RunningCall& call);
  absl::StatusOr<bool> PostTwoShotInput(ChunkAllReduce& chunk, bool blocking, const RunningCall& call);
  absl::StatusOr<bool> ReduceOwnSlice(ChunkAllReduce& chunk, bool blocking, const RunningCall& call);
  absl::StatusOr<bool> GatherSlices(ChunkAllReduce& chunk, bool blocking, const RunningCall& call);
  absl::StatusOr<bool> AwaitPeersDone(ChunkAllReduce& chunk, bool blocking, const RunningCall& call);
  // Reduces this rank's slice into its own tensor and every peer's (Note [Pushing the reduced slices]).
  // REQUIRES: every rank's input of the chunk is in its heap; all inputs posted ready.
  absl::Status PushReducedSlice(ChunkAllReduce& chunk);
  // The next step number (the queue's turn held).
  uint32_t NextStep() { return ++step_; }
  // The stamp of `call`, the group's next call (Note [Call stamps] in comm/shm/call_stamp.h): once per
  // call, first thing in its body, whether it takes steps or not.
  ShmCallStamp StampCall(const RunningCall& call);
  // Waits (as ShmChannel::Wait) until rank `peer` posted its input of `step` on `word` (kReady or
  // kInlineReady), then compares the stamp it posted with `mine`: FailedPrecondition naming both calls
  // when they differ, or when the peer posted its input on the other word.
  absl::Status WaitInput(int peer, ShmWord word, uint32_t step, const ShmCallStamp& mine, const RunningCall& call);
  // WaitInput for every rank other than this one.
  absl::Status WaitInputs(ShmWord word, uint32_t step, const ShmCallStamp& mine, const RunningCall& call);
  // The error of `call` (stamped `mine`) whose peer `peer` posted another call's input for `step`.
  absl::Status CallMismatch(int peer, uint32_t step, const ShmCallStamp& mine, const RunningCall& call);

  // Worker-thread bodies of the collectives; each moves its data in chunks of at most one slot.
  absl::Status RunAllReduce(const Tensor& tensor, ReduceOp op, const RunningCall& call);
  absl::Status RunBroadcast(const Tensor& tensor, int root, const RunningCall& call);
  absl::Status RunAllGather(const std::vector<Tensor>& outputs, const Tensor& input, const RunningCall& call);
  absl::Status RunReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                const RunningCall& call);
  absl::Status RunReduce(const Tensor& tensor, int root, ReduceOp op, const RunningCall& call);
  absl::Status RunBarrier(const RunningCall& call);
  // Where the ranks' inputs of a step lie.
  enum class InputPlace {
    kSlot,       // each rank's slot
    kInline,     // each rank's inline area (ShmChannel::InlineInput)
    kPublished,  // where each rank published it (its slot or its heap, ShmChannel::Input)
  };
  // out[0..count) = op over ranks (in rank order) of rank q's input of `step` [offset .. offset + count
  // elements), found at `place`, divided by size() for kAvg (fused: no pass of its own); this rank's
  // input read from `own` instead when `own` is set; also written to `also_out` when set. `out`,
  // `also_out` and `own` may be the same buffer (Note [Blocked reduction]). Fails only when a peer's heap
  // input cannot be mapped.
  absl::Status ReduceSlots(char* out, size_t offset_bytes, size_t count, DType dtype, ReduceOp op, uint32_t step,
                           InputPlace place, const char* own = nullptr, char* also_out = nullptr);

  std::unique_ptr<ShmChannel> channel_;
  const ProcessGroupShmOptions options_;
  uint32_t step_ = 0;       // whoever holds the queue's turn (worker, waiter, or an inline caller)
  ShmCallHistory history_;  // as step_
};

}  // namespace ddp

#endif  // DDP_COMM_SHM_PROCESS_GROUP_SHM_H_
