#ifndef DDP_COMM_SHM_SHM_CHANNEL_INTERNAL_H_
#define DDP_COMM_SHM_SHM_CHANNEL_INTERNAL_H_

// The shared-memory layout of a ShmChannel's segments and the word operations on it, shared by
// shm_channel.cc (creating, posting, reading) and shm_channel_wait.cc (waiting). Private to the
// shm_channel target (Note [Shared-memory protocol] in shm_channel.cc).

#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "comm/shm/shm_channel.h"
#include "comm/shm/shm_heap.h"

namespace ddp {
namespace shm_internal {

inline constexpr size_t kControlBytes = 4096;
inline constexpr int kNumWords = 3;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "a step word's low half (its step) is its futex word");

struct alignas(64) WordLine {
  ShmStepWord value;
};

// The control block at the start of every segment. Zero-initialised by ftruncate.
struct Control {
  WordLine words[kNumWords];
  alignas(64) std::atomic<uint32_t> sleepers;  // threads sleeping on one of this segment's words
  std::atomic<int32_t> abort;                  // 0: fine; 1: broken, lost rank unknown; r + 2: lost rank r
  std::atomic<int32_t> heap_fd;                // the owner's heap memfd + 1 (0: no heap)
  // Per step parity, where the owner's input of step input_step[p] lies: heap offset + 1 (0: its slot). A
  // step that published nothing finds another step's number here and reads the slot.
  alignas(64) std::atomic<uint64_t> input[2];
  std::atomic<uint32_t> input_step[2];
  // Per step parity: the owner's record of the call its input of that step belongs to (PostInput), read
  // only to name a mismatch, and the stamp it posted with kReady, read only by a reader that finds kReady
  // already at a later step. Plain memory: written before the input's word is posted (a seq_cst store),
  // read only after that word was seen, and rewritten only two steps later, after every reader's kDone.
  alignas(64) uint64_t call_record[2][ShmCallStamp::kRecordWords];
  uint32_t ready_stamp[2];
  // Per step parity: the step whose input the owner put in `data` (Post(kInlineReady)) with the stamp of
  // its call, then the input.
  struct alignas(64) InlineInput {
    ShmStepWord step;
    char data[ShmChannel::kInlineBytes];
  } inline_input[2];
};
static_assert(sizeof(Control::InlineInput) == 1024, "an inline area is 16 cache lines, its word in the first");
static_assert(sizeof(Control) <= kControlBytes, "control block must fit its page");

// The step in a step word's value.
inline uint32_t StepOf(uint64_t value) { return static_cast<uint32_t>(value); }
// The stamp beside it (an input's word).
inline uint32_t StampIn(uint64_t value) { return static_cast<uint32_t>(value >> 32); }

inline bool Reached(uint64_t value, uint32_t step) { return static_cast<int32_t>(StepOf(value) - step) >= 0; }

// Futexes on a step word: its low half, the step (little-endian, asserted above).
inline void FutexWait(ShmStepWord* word, uint32_t expected, absl::Duration timeout) {
  const timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void FutexWakeAll(ShmStepWord* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// The payload of a wait's status that PeerPostedInputElsewhere reads: the peer's rank.
inline constexpr absl::string_view kInputElsewhereUrl = "type.ddpengine/shm-input-elsewhere";

}  // namespace shm_internal

struct ShmChannel::Peer {
  char* base = nullptr;
  size_t bytes = 0;
  pid_t pid = 0;
  UniqueFd pidfd;
  std::unique_ptr<PeerHeap> heap;  // this peer's heap, mapped on demand (zero-copy only)
  shm_internal::Control* control() const { return reinterpret_cast<shm_internal::Control*>(base); }
  // The word `w` for `step` (all but kInlineReady have one word for every step).
  ShmStepWord& word(ShmWord w, uint32_t step) const {
    if (w == ShmWord::kInlineReady) return control()->inline_input[step % 2].step;
    return control()->words[static_cast<int>(w)].value;
  }
};

}  // namespace ddp

#endif  // DDP_COMM_SHM_SHM_CHANNEL_INTERNAL_H_
