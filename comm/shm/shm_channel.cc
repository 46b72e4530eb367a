#include "comm/shm/shm_channel.h"

#include <immintrin.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "comm/shm/shm_channel_internal.h"
#include "comm/shm/shm_segment.h"
#include "base/unique_fd.h"
#include "base/wall_clock.h"
#include "base/check.h"

// Note [Shared-memory protocol]
// Every rank owns one segment: a control block (three step words, a sleeper count and an abort word,
// each step word on its own cache line) and two data slots. A step word holds the step in its low 32
// bits, the word a futex sleeps on, and beside an input the stamp of its call in its high 32 bits (Note
// [Call stamps] in comm/shm/call_stamp.h). Only the owner writes its segment; every
// rank maps all segments. Collectives are cut into steps (one chunk of at most slot_bytes each); ranks
// count steps identically because they issue the same collectives with the same shapes, so no global
// barrier is needed per call: the step numbers themselves say who is where.
//   * Before writing its slot for step s (slot s % 2), a rank waits until every peer's kDone reached
//     s - 2: nobody still reads that slot (double buffering: step s+1 proceeds while a slow peer
//     still reads step s).
//   * After copying its input in, it posts kReady = s; a reader waits for the writer's kReady >= s.
//   * Small all-reduces: every rank reduces all slots (in rank order, so every rank gets bit-identical
//     results) into its output. Large ones: rank r reduces slice r of every
//     rank's input into slice r of its own slot (no peer reads slice r of rank r's slot in this step;
//     rank r never copies its own input's slice r in, it reads that from its output buffer), copies
//     it to its output and posts kReduced = s; then it copies slice q from rank q's slot once q's
//     kReduced >= s.
//   * After its last read of step s a rank posts kDone = s. Words only grow, so waits compare ">=".
//   * The smallest inputs (at most kInlineBytes) go into an inline area in the control block instead of
//     the slot, one per step parity, whose first cache line also holds its step word (kInlineReady): a
//     reader's one miss on that word brings the input's first 56 bytes with it, where the slot path
//     costs a miss on kReady and then one on the slot. A rank that posted its inline input for step
//     s - 1 has finished step s - 2, so when that word says so the kDone wait before step s reads a
//     line this rank already holds from step s - 1, instead of kDone, which the peer rewrote since:
//     back-to-back small all-reduces cost one cross-core miss per peer each.
//   * Zero-copy (Note [Zero-copy all-reduce] in allreduce_two_shot.cc): instead of copying its input into
//     its slot, a rank may publish, with the step number, the input's offset in its shared heap (a memfd
//     the peers open through /proc/<pid>/fd and map on demand, comm/shm/shm_heap.h); readers of step s
//     follow that record (Input). The record of step s is rewritten for step s + 2 only after the same
//     kDone wait as the slot, and a step that publishes nothing leaves another step's number in it, so
//     its readers use the slot.
// Waiting: spin for options.spin, then sleep on the word's futex (a shared futex: the word lives in
// shared memory). Sleepers count themselves in the owner's control block, so Post makes the wake
// system call only when someone sleeps (sequentially consistent store and load on both sides: either
// the poster sees the sleeper or the sleeper sees the new value before it sleeps). A sleeper wakes
// every liveness_interval to check the peers: each rank's pid (a pidfd, readable once the process
// exited) and the peers' abort words. A rank that finds a peer dead, or fails otherwise, writes the
// lost rank into its own abort word and wakes its words' sleepers, so the loss spreads to every
// survivor within about one interval and nobody waits for the timeout.
//
// Segments never leak: each is created with shm_open under a random name, and its owner unlinks the
// name as soon as every rank has mapped every segment (or when Create fails), before any collective
// runs; the mappings keep the memory alive, and the kernel frees it with the last mapping, whatever
// way the processes end. Only a SIGKILL inside Create itself, between shm_open and the unlink, leaves
// a name behind.
//
// Note [Segments every rank can reserve]
// A tmpfs hands out pages only when they are first touched, so a segment larger than what /dev/shm holds
// (Docker gives 64 MiB; a slot pair is 2 MiB per rank) is created and mapped without complaint, and the
// first write past the free space kills the process with SIGBUS. So a rank reserves all of its segment
// when it creates it (posix_fallocate, MapShmSegment) and the memfd heap reserves each block as it grows
// (comm/shm/shm_heap.h): what cannot be had fails at once, with /dev/shm's size and the bytes needed, and
// nothing is faulted in later. The failure must reach every rank, or the peers would wait for this
// rank's segment until the timeout while it leaves: the rank publishes "none <why>" as its segment
// record, every peer fails on reading it with that reason, and all of their errors satisfy
// IsShmSegmentUnavailable, so with --backend=auto every rank falls back to Gloo together (comm/init.cc).

namespace ddp {

using shm_internal::Control;
using shm_internal::FutexWakeAll;
using shm_internal::kControlBytes;
using shm_internal::kInputElsewhereUrl;
using shm_internal::Reached;
using shm_internal::StampIn;
using shm_internal::StepOf;

namespace {

// A pidfd for `pid` (readable once the process exited), or -1 where the kernel has none.
int OpenPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  return -1;
#endif
}

std::string SegmentKey(int rank) { return absl::StrCat("shm/segment/", rank); }
std::string MappedKey(int rank) { return absl::StrCat("shm/mapped/", rank); }

// The segment record of a rank that could not create its segment: this prefix, then why.
constexpr absl::string_view kNoSegment = "none ";

// The payload that marks a status of IsShmSegmentUnavailable.
constexpr absl::string_view kSegmentUnavailableUrl = "type.ddpengine/shm-segment-unavailable";

absl::Status SegmentUnavailable(absl::StatusCode code, absl::string_view message) {
  absl::Status status(code, message);
  MarkShmSegmentUnavailable(status);
  return status;
}

// Reads rank `rank`'s "<pid> <bytes> <name>" from the store.
absl::Status ReadPeerRecord(Store& store, int rank, absl::Duration timeout, pid_t* pid, size_t* bytes,
                            std::string* name) {
  absl::StatusOr<std::string> record = store.Get(SegmentKey(rank), timeout);
  if (!record.ok()) {
    return absl::UnavailableError(
        absl::StrCat("rank ", rank, " never published its shared-memory segment: ", record.status().message()));
  }
  if (absl::StartsWith(*record, kNoSegment)) {
    return SegmentUnavailable(absl::StatusCode::kResourceExhausted, record->substr(kNoSegment.size()));
  }
  std::vector<std::string> parts = absl::StrSplit(*record, ' ');
  int64_t pid64 = 0;
  uint64_t bytes64 = 0;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &pid64) || !absl::SimpleAtoi(parts[1], &bytes64)) {
    return absl::DataLossError(absl::StrCat("rank ", rank, "'s segment record \"", *record, "\" is malformed"));
  }
  *pid = static_cast<pid_t>(pid64);
  *bytes = bytes64;
  *name = parts[2];
  return absl::OkStatus();
}

}  // namespace

int PeerPostedInputElsewhere(const absl::Status& status) {
  const auto peer = status.GetPayload(kInputElsewhereUrl);
  int rank = -1;
  if (!peer.has_value() || !absl::SimpleAtoi(std::string(*peer), &rank)) return -1;
  return rank;
}

bool IsShmSegmentUnavailable(const absl::Status& status) {
  return status.GetPayload(kSegmentUnavailableUrl).has_value();
}

void MarkShmSegmentUnavailable(absl::Status& status) {
  if (!status.ok()) status.SetPayload(kSegmentUnavailableUrl, absl::Cord("1"));
}

void ShmWaiters::Begin() {
  blocked_.fetch_add(1, std::memory_order_seq_cst);
  if (oversubscribed_group_ || contention_->oversubscribed()) return;
  if (ShmStepWord* word = sleeping_on_.load(std::memory_order_seq_cst)) FutexWakeAll(word);
}

ShmChannel::ShmChannel(int rank, int size, ShmChannelOptions options)
    : rank_(rank),
      size_(size),
      options_(std::move(options)),
      contention_(options_.contention != nullptr ? options_.contention : &CpuContention::ForProcess()),
      oversubscribed_group_(size > UsableCpus()),
      waiters_(std::make_shared<ShmWaiters>(contention_, oversubscribed_group_)),
      peers_(size) {}

ShmChannel::~ShmChannel() {
  for (Peer& peer : peers_) {
    if (peer.base != nullptr) munmap(peer.base, peer.bytes);
  }
}

absl::StatusOr<std::unique_ptr<ShmChannel>> ShmChannel::Create(Store& store, int rank, int size,
                                                               const ShmChannelOptions& options) {
  std::unique_ptr<ShmChannel> channel(new ShmChannel(rank, size, options));
  const size_t bytes = kControlBytes + 2 * options.slot_bytes;
  const std::string name = absl::StrCat("/", options.name_tag, "-", getpid(), "-", rank, "-", RandomShmSuffix());
  Peer& self = channel->peers_[rank];
  absl::StatusOr<char*> own = MapShmSegment(name, bytes, /*create=*/true);
  if (!own.ok()) {
    // The peers learn it from this rank's record instead of waiting for it until the timeout, so that
    // every rank fails alike (Note [Segments every rank can reserve]).
    const std::string why = absl::StrCat("rank ", rank, " cannot create its shared-memory segment: ",
                                         own.status().message());
    (void)store.Set(SegmentKey(rank), absl::StrCat(kNoSegment, why));
    return SegmentUnavailable(own.status().code(), why);
  }
  self.base = *own;
  absl::Cleanup unlink_name = [&name] { shm_unlink(name.c_str()); };  // on every path out of Create
  self.bytes = bytes;
  self.pid = getpid();
  if (options.zero_copy) {
    absl::StatusOr<std::shared_ptr<ShmHeap>> heap = ShmHeap::Create();
    if (heap.ok()) {
      channel->heap_ = *std::move(heap);
      self.control()->heap_fd.store(channel->heap_->fd() + 1, std::memory_order_release);
    } else {
      channel->zero_copy_off_reason_ = absl::StrCat("rank ", rank, ": ", heap.status().message());
    }
  }
  DDP_RETURN_IF_ERROR(store.Set(SegmentKey(rank), absl::StrCat(getpid(), " ", bytes, " ", name)));
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    Peer& peer = channel->peers_[q];
    std::string peer_name;
    DDP_RETURN_IF_ERROR(ReadPeerRecord(store, q, options.rendezvous_timeout, &peer.pid, &peer.bytes, &peer_name));
    absl::StatusOr<char*> base = MapShmSegment(peer_name, peer.bytes, /*create=*/false);
    if (!base.ok()) {
      return absl::Status(base.status().code(), absl::StrCat("cannot map rank ", q, "'s segment (is rank ", q,
                                                             " on another host?): ", base.status().message()));
    }
    peer.base = *base;
    if (peer.pid != getpid()) peer.pidfd.Reset(OpenPidfd(peer.pid));
    channel->OpenPeerHeap(q);
  }
  // "1", or "0 <why this rank cannot use zero-copy>": zero-copy is on only when every rank says "1".
  if (!options.zero_copy) channel->zero_copy_off_reason_ = absl::StrCat("rank ", rank, " turned zero-copy off");
  DDP_RETURN_IF_ERROR(store.Set(MappedKey(rank), channel->zero_copy_off_reason_.empty()
                                                     ? "1"
                                                     : absl::StrCat("0 ", channel->zero_copy_off_reason_)));
  std::vector<std::string> mapped;
  for (int q = 0; q < size; ++q) mapped.push_back(MappedKey(q));
  if (absl::Status all = store.Wait(mapped, options.rendezvous_timeout); !all.ok()) {
    return absl::UnavailableError(absl::StrCat("not every rank mapped the segments: ", all.message()));
  }
  for (int q = 0; q < size && channel->heap_ != nullptr; ++q) {
    DDP_ASSIGN_OR_RETURN(std::string value, store.Get(MappedKey(q), options.rendezvous_timeout));
    if (value != "1") {
      channel->zero_copy_off_reason_ = value.size() > 2 ? value.substr(2) : absl::StrCat("rank ", q, " cannot use it");
      channel->heap_.reset();
      for (Peer& peer : channel->peers_) peer.heap.reset();
    }
  }
  return channel;
}

void ShmChannel::OpenPeerHeap(int q) {
  if (heap_ == nullptr) return;
  Peer& peer = peers_[q];
  const int32_t fd = peer.control()->heap_fd.load(std::memory_order_acquire) - 1;
  if (fd < 0) {
    zero_copy_off_reason_ = absl::StrCat("rank ", q, " has no shared heap");
    return;
  }
  peer.heap = std::make_unique<PeerHeap>();
  if (absl::Status opened = peer.heap->Open(peer.pid, fd); !opened.ok()) {
    zero_copy_off_reason_ = absl::StrCat("rank ", rank_, ": ", opened.message());
    peer.heap.reset();
  }
}

// Both stores precede the Post(kReady) that publishes them (a seq_cst store), and readers load them after
// seeing that word (acquire), so relaxed accesses suffice here.
void ShmChannel::PublishInput(uint32_t step, int64_t heap_offset) {
  Control* control = peers_[rank_].control();
  control->input[step % 2].store(heap_offset < 0 ? 0 : static_cast<uint64_t>(heap_offset) + 1,
                                 std::memory_order_relaxed);
  control->input_step[step % 2].store(step, std::memory_order_relaxed);
}

uint64_t ShmChannel::HeapInput(int owner, uint32_t step) const {
  const Control* control = peers_[owner].control();
  if (control->input_step[step % 2].load(std::memory_order_relaxed) != step) return 0;
  return control->input[step % 2].load(std::memory_order_relaxed);
}

absl::StatusOr<const char*> ShmChannel::Input(int owner, uint32_t step, size_t offset_bytes, size_t bytes) {
  Peer& peer = peers_[owner];
  const uint64_t where = HeapInput(owner, step);
  if (where == 0) return Slot(owner, step) + offset_bytes;
  if (owner == rank_) {
    if (heap_ == nullptr) return absl::InternalError("this rank published a heap input without a heap");
    return heap_->At(where - 1 + offset_bytes);
  }
  if (peer.heap == nullptr) {
    return absl::DataLossError(absl::StrCat("rank ", owner, " published an input in its shared heap, which rank ",
                                            rank_, " has not mapped"));
  }
  absl::StatusOr<const char*> at = peer.heap->At(where - 1 + offset_bytes, bytes);
  if (!at.ok()) {
    return absl::Status(at.status().code(), absl::StrCat("rank ", owner, "'s input: ", at.status().message()));
  }
  return at;
}

bool ShmChannel::AllInputsInHeap(uint32_t step) const {
  for (int q = 0; q < size_; ++q) {
    if (HeapInput(q, step) == 0) return false;
  }
  return true;
}

absl::StatusOr<char*> ShmChannel::HeapInputToWrite(int owner, uint32_t step, size_t offset_bytes,
                                                   size_t bytes) {
  if (HeapInput(owner, step) == 0) {
    return absl::InternalError(
        absl::StrCat("rank ", owner, "'s input of step ", step, " is not in its heap"));
  }
  absl::StatusOr<const char*> at = Input(owner, step, offset_bytes, bytes);
  if (!at.ok()) return at.status();
  return const_cast<char*>(*at);  // a heap mapping, PROT_READ | PROT_WRITE (comm/shm/shm_heap.cc)
}

char* ShmChannel::InlineInput(int owner, uint32_t step) const {
  return peers_[owner].control()->inline_input[step % 2].data;
}

char* ShmChannel::Slot(int owner, uint32_t step) const {
  return peers_[owner].base + kControlBytes + (step % 2) * options_.slot_bytes;
}

// One store publishes the step and the stamp, so a reader spinning on the word's line loses it to this
// rank once, as for a bare Post (Note [Call stamps] in comm/shm/call_stamp.h).
void ShmChannel::PostInput(ShmWord word, uint32_t step, const ShmCallStamp& call) {
  Peer& self = peers_[rank_];
  std::memcpy(self.control()->call_record[step % 2], call.record.data(), sizeof(call.record));
  self.control()->ready_stamp[step % 2] = call.stamp;
  ShmStepWord& w = self.word(word, step);
  w.store(uint64_t{call.stamp} << 32 | step, std::memory_order_seq_cst);
  if (self.control()->sleepers.load(std::memory_order_seq_cst) > 0) FutexWakeAll(&w);
}

// kReady may have moved on to the peer's next step (it posts step + 1 once it read this rank's input
// of step): then the stamp of `step` is the one it left in its record line.
uint32_t ShmChannel::InputStamp(int peer, ShmWord word, uint32_t step) const {
  const uint64_t value = peers_[peer].word(word, step).load(std::memory_order_acquire);
  if (StepOf(value) == step) return StampIn(value);
  return peers_[peer].control()->ready_stamp[step % 2];
}

std::array<uint64_t, ShmCallStamp::kRecordWords> ShmChannel::InputCallRecord(int peer, uint32_t step) const {
  std::array<uint64_t, ShmCallStamp::kRecordWords> record;
  std::memcpy(record.data(), peers_[peer].control()->call_record[step % 2], sizeof(record));
  return record;
}

bool ShmChannel::PostedInputElsewhere(int peer, ShmWord word, uint32_t step) const {
  const Control* control = peers_[peer].control();
  const bool posted_inline = StepOf(control->inline_input[step % 2].step.load(std::memory_order_acquire)) == step;
  if (word == ShmWord::kReady) return posted_inline;
  if (word != ShmWord::kInlineReady) return false;
  const uint64_t ready = control->words[static_cast<int>(ShmWord::kReady)].value.load(std::memory_order_acquire);
  return !posted_inline && Reached(ready, step);
}

void ShmChannel::Post(ShmWord word, uint32_t step) {
  Peer& self = peers_[rank_];
  ShmStepWord& w = self.word(word, step);
  w.store(step, std::memory_order_seq_cst);
  if (self.control()->sleepers.load(std::memory_order_seq_cst) > 0) FutexWakeAll(&w);
}

}  // namespace ddp
