// ShmChannel: the shared-memory segments and the step protocol under ProcessGroupShm (ranks of one host).
// Each rank owns one POSIX shared-memory segment: a control block of step words and two data slots
// (double buffers). Every rank maps every rank's segment, so a rank writes only its own slots and words
// and reads anyone's. See Note [Shared-memory protocol] in comm/shm/shm_channel.cc.
#ifndef DDP_COMM_SHM_SHM_CHANNEL_H_
#define DDP_COMM_SHM_SHM_CHANNEL_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/shm/cpu_contention.h"
#include "comm/shm/shm_heap.h"
#include "store/store.h"

namespace ddp {

struct ShmChannelOptions {
  // Bytes of each of the two data slots of every rank's segment (a collective larger than a slot runs
  // in chunks of at most this size).
  size_t slot_bytes = size_t{1} << 20;
  // How long a waiter spins before it sleeps on a futex (short: two ranks on two cores must not burn a
  // core each while the other computes).
  absl::Duration spin = absl::Microseconds(30);
  // How long a wait spins instead while a thread of this process is blocked on one of the group's Works
  // (Note [Spinning while the process waits]): the core has nothing else of this process to run, and a
  // core that sleeps is slow to wake on a virtual machine. Only while the CPUs are not oversubscribed
  // (otherwise contended_spin: the peer may need this core).
  absl::Duration spin_while_waited = absl::Milliseconds(5);
  // How long a wait spins (at most; never longer than `spin`) while more threads want this host's CPUs
  // than there are, or the group has more ranks than this process may use CPUs (Note [Spinning under
  // contention]): the peer waited for may be the thread without a CPU, and a spin would keep it off.
  absl::Duration contended_spin = absl::Microseconds(2);
  // Where waits learn whether the CPUs are oversubscribed; nullptr: CpuContention::ForProcess(). Tests
  // pass their own. Must outlive the channel and the Works of its group.
  CpuContention* contention = nullptr;
  // How often a sleeping waiter wakes to check that the rank it waits for is alive.
  absl::Duration liveness_interval = absl::Milliseconds(100);
  // Bound on the rendezvous (segment names and mappings exchanged through the store).
  absl::Duration rendezvous_timeout = absl::Seconds(300);
  // First part of the segment names in /dev/shm ("<tag>-<pid>-<rank>-<random>"); tests set their own
  // to prove that nothing is left behind.
  std::string name_tag = "ddp-shm";
  // Give every rank a shared heap (comm/shm/shm_heap.h) whose blocks the peers read in place (Note [Zero-copy
  // all-reduce]). Off on every rank when any rank turns it off or cannot open a peer's heap.
  bool zero_copy = true;
};

// Formats the prefix of an error message (e.g. "AllReduce(sum) #7 of 1 float32 on rank 0/2 (shm) failed");
// called only when a wait fails.
using ShmWhat = absl::FunctionRef<std::string()>;

// The step words each rank publishes in its own control block (all start at 0; steps count from 1).
enum class ShmWord : int {
  kReady = 0,    // the rank's input for this step is in its slot
  kReduced = 1,  // the rank's reduced slice of this step is in its slot (large all-reduce)
  kDone = 2,     // the rank finished reading every slot of this step (its slots may be reused)
  // The rank's input for this step is in its inline area (InlineInput): a word per step parity that
  // shares its cache line with the input's first bytes, so a peer's one miss brings both.
  kInlineReady = 3,
};

// A step word in shared memory: the step in its low 32 bits (the futex word), and, beside an input's word,
// the stamp of its call in the high 32 bits, so that one store publishes both.
using ShmStepWord = std::atomic<uint64_t>;

// How a rank's input of a step names the call it belongs to (Note [Call stamps] in comm/shm/call_stamp.h):
// a stamp every reader compares with its own, and a record, opaque to the channel, that only a reader
// whose stamp differs reads back to name both calls.
struct ShmCallStamp {
  static constexpr int kRecordWords = 6;
  uint32_t stamp = 0;
  std::array<uint64_t, kRecordWords> record{};
};

// The peer's rank when `status` (from a Wait for kReady or kInlineReady) says that the peer posted its
// input of that step on the other of those two words: its call differs from this rank's (a size that
// takes the other path). -1 otherwise.
int PeerPostedInputElsewhere(const absl::Status& status);

// How many threads of this process are blocked on the group's Works, and the futex word the channel's
// waiter sleeps on (Note [Spinning while the process waits]). Shared by a ShmChannel and the Works of its
// group, which may outlive it. Thread-safe.
class ShmWaiters {
 public:
  // `contention` (not owned, outlives this) and `oversubscribed_group` (the group has more ranks than
  // the CPUs this process may use) say when a wait would not spin long anyway.
  ShmWaiters(CpuContention* contention, bool oversubscribed_group)
      : contention_(contention), oversubscribed_group_(oversubscribed_group) {}
  // A thread is about to block on one of the group's Works: waits spin longer from now on, and a wait
  // asleep on its futex is woken to spin, unless the CPUs are oversubscribed (it would only spin
  // contended_spin and sleep again). Each Begin is followed by exactly one End.
  void Begin();
  void End() { blocked_.fetch_sub(1, std::memory_order_seq_cst); }
  // Whether a thread is blocked on one of the group's Works.
  bool Any() const { return blocked_.load(std::memory_order_seq_cst) > 0; }
  // The channel's waiter is about to sleep on `word` (nullptr: it woke). Only the channel's thread calls it.
  void SleepingOn(ShmStepWord* word) { sleeping_on_.store(word, std::memory_order_seq_cst); }

 private:
  CpuContention* const contention_;
  const bool oversubscribed_group_;
  std::atomic<int> blocked_{0};
  std::atomic<ShmStepWord*> sleeping_on_{nullptr};
};

// Whether `status` (from ShmChannel::Create, or an error that kept it with MarkShmSegmentUnavailable)
// says that a rank of the group could not create its shared-memory segment: too small a /dev/shm, or
// none. Every rank's Create then fails so, with the reason of the rank that could not (Note [Segments
// every rank can reserve] in comm/shm/shm_channel.cc), so the ranks may all choose another backend.
bool IsShmSegmentUnavailable(const absl::Status& status);
// Marks `status` (not OK) so that IsShmSegmentUnavailable holds: for callers that wrap Create's error
// in their own.
void MarkShmSegmentUnavailable(absl::Status& status);

// The mapped segments of a group of `size` ranks of one host. Not thread-safe: one thread (the
// group's worker) drives it; waiters() may be shared with any thread. The segments' names are unlinked
// before Create returns, so nothing is left in /dev/shm whatever happens to the processes afterwards.
class ShmChannel {
 public:
  // Creates this rank's segment (all its bytes reserved at once), exchanges names and process ids
  // through `store` (keys under "shm/"), maps every rank's segment, waits until every rank has mapped all
  // of them, and unlinks its own name (also on failure). `store` is used only during Create. Errors name
  // the rank that never arrived; when a rank cannot create its segment every rank fails with that rank's
  // reason (e.g. /dev/shm's size and the bytes needed) and IsShmSegmentUnavailable.
  // REQUIRES: 0 <= rank < size.
  static absl::StatusOr<std::unique_ptr<ShmChannel>> Create(Store& store, int rank, int size,
                                                            const ShmChannelOptions& options);
  // Unmaps the segments (the kernel frees a segment once its last mapping is gone).
  ~ShmChannel();
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slot_bytes() const { return options_.slot_bytes; }
  // What the group's Works report when a thread blocks on them (Note [Spinning while the process waits]).
  const std::shared_ptr<ShmWaiters>& waiters() const { return waiters_; }
  // Since Create: futex sleeps of this rank's waits, and waits that spun past options.spin because a
  // thread of this process was blocked on the group. Thread-safe (for tests and diagnostics).
  uint64_t sleeps() const { return sleeps_.load(std::memory_order_relaxed); }
  uint64_t long_spins() const { return long_spins_.load(std::memory_order_relaxed); }

  // Rank `owner`'s data slot for `step` (slot step % 2). Only the owner writes it.
  char* Slot(int owner, uint32_t step) const;
  // Most bytes an inline area holds (8-byte aligned).
  static constexpr size_t kInlineBytes = 1016;
  // Rank `owner`'s inline area for `step` (one per step parity, reused like the slots): for inputs of at
  // most kInlineBytes, published with Post(kInlineReady, step) instead of kReady. Only the owner writes it.
  char* InlineInput(int owner, uint32_t step) const;
  // Blocks until every other rank finished reading step - 2 (its kDone word reached step - 2, or it
  // already posted an inline input for step - 1), so this rank may overwrite the slot and inline area
  // of `step`. `what()` names the collective in errors.
  absl::Status WaitSlotFree(uint32_t step, absl::Time deadline, ShmWhat what);
  // Publishes `word` = `step` for this rank and wakes the peers sleeping on it.
  void Post(ShmWord word, uint32_t step);
  // Post of an input's word (kReady or kInlineReady) with the stamp and record of its call, which the
  // readers of `step` compare (InputStamp) before they use the input. Like the slot, the stamp and the
  // record of `step` are reused for step + 2: REQUIRES WaitSlotFree(step) first.
  void PostInput(ShmWord word, uint32_t step, const ShmCallStamp& call);
  // The stamp rank `peer` posted with its input of `step` on `word` (kReady or kInlineReady), and the
  // record of its call. Valid once that word reached `step`, until this rank posts kDone = step.
  uint32_t InputStamp(int peer, ShmWord word, uint32_t step) const;
  std::array<uint64_t, ShmCallStamp::kRecordWords> InputCallRecord(int peer, uint32_t step) const;
  // Blocks until rank `peer`'s `word` reached `step`, `deadline` passed (DeadlineExceeded naming the
  // word, step and peer), a rank was lost (Unavailable naming it: its process exited, or a peer
  // announced it lost), or, waiting for kReady or kInlineReady, the peer posted its input of `step` on
  // the other word (FailedPrecondition, PeerPostedInputElsewhere). `what()` prefixes the error.
  absl::Status Wait(int peer, ShmWord word, uint32_t step, absl::Time deadline, ShmWhat what);
  // Wait for every rank other than this one.
  absl::Status WaitAll(ShmWord word, uint32_t step, absl::Time deadline, ShmWhat what);
  // Spins at most options.spin until rank `peer`'s `word` reached `step`; never sleeps and never fails
  // (false: not yet; a lost peer is found by the blocking Wait that follows). For the inline path.
  bool TrySpin(int peer, ShmWord word, uint32_t step);
  // TrySpin for every rank other than this one (each gets up to options.spin).
  bool TrySpinAll(ShmWord word, uint32_t step);
  // TrySpinAll(kDone, step - 2): WaitSlotFree without blocking.
  bool TrySlotFree(uint32_t step);
  // This rank's shared heap, or nullptr when zero-copy is off (options.zero_copy, or a rank could not
  // open a peer's heap: zero_copy_off_reason() says why). Blocks allocated here may be published as
  // inputs (PublishInput).
  const std::shared_ptr<ShmHeap>& heap() const { return heap_; }
  const std::string& zero_copy_off_reason() const { return zero_copy_off_reason_; }
  // Publishes where this rank's input of `step` lies: at `heap_offset` of its heap, or (-1) in its slot
  // for that step. Call before Post(kReady, step); the record is reused two steps later, like the slot.
  void PublishInput(uint32_t step, int64_t heap_offset);
  // Where byte `offset_bytes` of rank `owner`'s input of `step` (of `bytes` bytes from there) is in this
  // process: in its slot, or in its heap (mapped on demand). Valid once its kReady >= step, until this
  // rank posts kDone = step. Errors (a heap that cannot be mapped) name the rank.
  absl::StatusOr<const char*> Input(int owner, uint32_t step, size_t offset_bytes, size_t bytes);
  // Whether every rank published its input of `step` in its heap (PublishInput with an offset). Valid
  // once every rank's kReady >= step; every rank then gets the same answer.
  bool AllInputsInHeap(uint32_t step) const;
  // Input() of a rank whose input of `step` lies in its heap, writable (heaps are mapped read-write in
  // every process): Note [Pushing the reduced slices] in allreduce_two_shot.cc. Errors name the rank;
  // an input in a slot is an internal error.
  absl::StatusOr<char*> HeapInputToWrite(int owner, uint32_t step, size_t offset_bytes, size_t bytes);
  // Announces that the group is broken (`lost_rank`, or -1 when unknown) so that ranks waiting on this
  // one fail at their next check instead of at the timeout.
  void Abort(int lost_rank);

 private:
  struct Peer;
  ShmChannel(int rank, int size, ShmChannelOptions options);
  // "" while every rank looks alive and no rank announced a loss; otherwise the reason, e.g. "lost rank
  // 2 (process 81 exited)". Records the lost rank in this rank's own control block (Abort).
  std::string CheckPeers(bool check_processes);
  // Rank `owner`'s published heap offset + 1 of its input of `step`, 0 when that input is in its slot.
  uint64_t HeapInput(int owner, uint32_t step) const;
  // Opens rank q's heap (after mapping its segment); on failure records why zero-copy is off.
  void OpenPeerHeap(int q);
  // Whether rank `peer` posted its input of `step` on the other input word than `word` (kReady or
  // kInlineReady; false for the others).
  bool PostedInputElsewhere(int peer, ShmWord word, uint32_t step) const;
  // Whether rank `peer` finished every read of `step` (kDone, or a later inline input posted).
  bool FinishedStep(int peer, uint32_t step) const;
  // Spins until `w` reached `step` (true) or the spin budget passed (false): SpinBudget, re-read at
  // every clock read.
  bool SpinUntil(const ShmStepWord& w, uint32_t step, bool may_extend) const;
  // How long a wait that began spinning may spin, as of `now` (Note [Spinning under contention]):
  // contended_spin while the CPUs are oversubscribed; else spin_while_waited while `may_extend` and a
  // thread of this process is blocked on the group's Works; else options.spin. Samples the CPUs'
  // contention when this thread is the one of its process that runs for the group: the inline caller
  // (not `may_extend`), or a worker while a thread is blocked on the group.
  absl::Duration SpinBudget(absl::Time now, bool may_extend) const;
  // Sleeps on a futex until rank `peer`'s `word` reached `step` (the slow path of Wait). `spun_long`: the
  // spin before it already ran with spin_while_waited (a wait spins that long at most once).
  absl::Status Sleep(int peer, ShmWord word, uint32_t step, absl::Time deadline, ShmWhat what,
                     bool spun_long);

  const int rank_;
  const int size_;
  const ShmChannelOptions options_;
  CpuContention* const contention_;  // options.contention, or the process's
  // The group has more ranks than the CPUs this process may use: waits always spin contended_spin.
  const bool oversubscribed_group_;
  const std::shared_ptr<ShmWaiters> waiters_;
  std::atomic<uint64_t> sleeps_{0};
  mutable std::atomic<uint64_t> long_spins_{0};  // counted by SpinUntil, a const method
  std::vector<Peer> peers_;  // index = rank, this rank included
  std::shared_ptr<ShmHeap> heap_;
  std::string zero_copy_off_reason_;
};

}  // namespace ddp

#endif  // DDP_COMM_SHM_SHM_CHANNEL_H_
