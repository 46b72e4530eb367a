// FlightRecorder: the last N calls of one process group, kept in a ring buffer so that, when a
// collective hangs or fails, each rank can say what it issued, what ran, what completed and what it is
// stuck in (PyTorch's NCCL flight recorder, for the queued backends). Note [Flight recorder] in the .cc
// says what an entry holds and why recording costs next to nothing; comm/flight_recorder_postmortem.h
// dumps it and compares the ranks' progress when a call fails, and `//comm:flight_recorder_report`
// reads the dumps of every rank.
#ifndef DDP_COMM_FLIGHT_RECORDER_H_
#define DDP_COMM_FLIGHT_RECORDER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/async_work.h"
#include "comm/collective_description.h"
#include "store/launch_env.h"

namespace ddp {

// How many calls a group's recorder keeps, and where its dumps go.
struct FlightRecorderOptions {
  // Calls kept (the newest ones); 0 turns the recorder off: nothing is recorded or dumped.
  // DDP_FLIGHT_RECORDER_ENTRIES sets it (FlightRecorderOptionsFromEnv).
  int entries = 2000;
  // The folder that receives each group's dump folder (Note [Flight recorder dumps] in
  // comm/flight_recorder_dump.cc); "": ${TMPDIR:-/tmp}/ddp-flight-recorder. DDP_FLIGHT_RECORDER_DIR sets it.
  std::string dump_dir;
};

// The most entries DDP_FLIGHT_RECORDER_ENTRIES may ask for (an entry costs about 100 bytes plus the call's
// Work, kept alive until the ring overwrites it).
inline constexpr int kMaxFlightRecorderEntries = 1 << 20;

// The options from DDP_FLIGHT_RECORDER_ENTRIES (an integer 0..kMaxFlightRecorderEntries) and
// DDP_FLIGHT_RECORDER_DIR, each defaulting as above. kInvalidArgument naming the variable and its value
// otherwise.
absl::StatusOr<FlightRecorderOptions> FlightRecorderOptionsFromEnv(const EnvLookup& env);

// Where a recorded call stands.
enum class FlightState : uint8_t {
  kIssued,     // queued: its body has not started
  kStarted,    // its body runs (on the worker, a waiter or the calling thread)
  kCompleted,  // finished successfully
  kFailed,     // finished with an error (a failure, a broken group's refusal, a cancellation)
};

// "issued", "started", "completed", "failed".
const char* FlightStateName(FlightState state);

// One recorded call, as a snapshot saw it.
struct FlightEntry {
  uint64_t record = 0;              // 0 for the first call the recorder saw, then 1, 2, ... (every call)
  uint64_t sequence = kUnnumbered;  // the group's sequence number; kUnnumbered for Send and Recv
  CollectiveSpec spec;
  FlightState state = FlightState::kIssued;
  absl::Time issued = absl::InfinitePast();   // to the coarse clock's tick (1-4 ms; Note [Flight recorder])
  absl::Time started = absl::InfinitePast();  // InfinitePast until it started
  absl::Time ended = absl::InfinitePast();    // InfinitePast until it finished
  std::string error;                          // the failure, for kFailed
};

// The ring. Thread-safe: Record runs under mu(), which its group takes to issue a call anyway (the
// group's issue lock), Snapshot and the rest on any thread.
class FlightRecorder {
 public:
  // Keeps the newest `capacity` calls; 0 keeps none (Record does nothing, mu() still serves the group).
  // REQUIRES: 0 <= capacity <= kMaxFlightRecorderEntries.
  explicit FlightRecorder(int capacity);

  // The lock Record requires: the issue lock of the group that records.
  absl::Mutex& mu() ABSL_LOCK_RETURNED(mu_) { return mu_; }

  // Records that call `spec`, numbered `sequence`, was issued now. The ring keeps `work` until the call
  // completed and a later Record copied its outcome (Note [Flight recorder]); a snapshot reads the state
  // of a call still running from its Work. Cost: one clock read, a few stores, and the outcome of
  // (usually) one completed call.
  void Record(uint64_t sequence, const CollectiveSpec& spec, std::shared_ptr<AsyncWork> work)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The calls kept, oldest first, each with its state now; the call whose Work is `failing` (one whose
  // body just failed with `failure` and will complete with it) is shown failed.
  std::vector<FlightEntry> Snapshot(const AsyncWork* failing = nullptr, absl::string_view failure = {}) const;

  // Drops every entry (and the Works they keep). Record may be called again afterwards.
  void Clear();

  int capacity() const { return capacity_; }
  bool enabled() const { return capacity_ > 0; }
  // How many calls were recorded since construction (or the last Clear): the next entry's `record`.
  uint64_t recorded() const;

 private:
  // One call in one cache line (Note [Flight recorder]): the spec packed, times as Unix nanoseconds (0:
  // not yet), the Work kept apart in works_.
  struct alignas(64) Slot {
    uint64_t sequence = kUnnumbered;
    int64_t numel = 0;
    int64_t issued_ns = 0;
    int64_t started_ns = 0;
    int64_t ended_ns = 0;
    int32_t root = -1;
    int32_t tag = 0;
    CollectiveKind kind = CollectiveKind::kBarrier;
    uint8_t op = 0;     // ReduceOp
    uint8_t dtype = 0;  // DType
    FlightState state = FlightState::kIssued;  // kCompleted or kFailed once resolved
  };
  static_assert(sizeof(Slot) == 64, "a slot is one cache line");

  // Copies the outcome of every completed call from the oldest unresolved one on, stopping at the first
  // call still running (calls complete in issue order), and lets their Works go.
  void ResolveCompleted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The entry of `record` (kept in the ring) as a snapshot shows it.
  FlightEntry EntryOf(uint64_t record, const AsyncWork* failing, absl::string_view failure) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int capacity_;
  mutable absl::Mutex mu_;
  std::vector<Slot> ring_ ABSL_GUARDED_BY(mu_);  // capacity_ slots
  // The Work of record r at works_[r % capacity_] while r is unresolved (resolved_ <= r < next_), else null.
  std::vector<std::shared_ptr<AsyncWork>> works_ ABSL_GUARDED_BY(mu_);
  // The errors of resolved failed calls still in the ring, by record (failures are rare: kept apart).
  std::map<uint64_t, std::string> errors_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;      // calls recorded; the newest is record next_ - 1
  uint64_t resolved_ ABSL_GUARDED_BY(mu_) = 0;  // every record below it has its outcome copied
};

}  // namespace ddp

#endif  // DDP_COMM_FLIGHT_RECORDER_H_
