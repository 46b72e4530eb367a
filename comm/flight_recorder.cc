#include "comm/flight_recorder.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/wall_clock.h"

namespace ddp {

// Note [Flight recorder]
// Every call a queued group issues (QueuedProcessGroup::IssueStarted and TryBeginInline) is recorded
// here, under the group's issue lock, so the ring's order is the group's issue order and the sequence
// numbers match across ranks: call #N of a group is the same call on every rank that got that far. An
// entry keeps the call's spec (op, reduce op or root, element count, dtype: plain data, no strings), the
// time it was issued and its Work. The Work already records when its body started and ended and how it
// finished (AsyncWork), so the recorder does not copy those on the hot path; a snapshot reads them from
// the Work. The issue lock is the recorder's own mutex (mu()), which the group takes to number a call
// anyway, so recording takes no lock of its own: it costs one clock read, a shared_ptr copy and a few
// stores (BENCHMARKS.md, section Flight recorder, measures it against DDP_FLIGHT_RECORDER_ENTRIES=0 at
// 4 B). A Work lives on in the ring until its entry is overwritten N calls later, a few hundred bytes
// each; the group drops the Work the ring lets go of after the lock (its last reference may free it,
// which is no work for the lock to cover).

namespace {

FlightState StateOf(AsyncWork& work, std::string* error) {
  if (work.IsCompleted()) {
    // Completed: AsyncWork::Wait returns the final status without blocking (and without a subclass's
    // Wait, which may try to run the call).
    const absl::Status status = work.AsyncWork::Wait(absl::ZeroDuration());
    if (status.ok()) return FlightState::kCompleted;
    *error = std::string(status.message());
    return FlightState::kFailed;
  }
  return work.StartTime() == absl::InfinitePast() ? FlightState::kIssued : FlightState::kStarted;
}

}  // namespace

absl::StatusOr<FlightRecorderOptions> FlightRecorderOptionsFromEnv(const EnvLookup& env) {
  FlightRecorderOptions options;
  if (std::optional<std::string> entries = env("DDP_FLIGHT_RECORDER_ENTRIES"); entries.has_value()) {
    int parsed = 0;
    if (!absl::SimpleAtoi(*entries, &parsed) || parsed < 0 || parsed > kMaxFlightRecorderEntries) {
      return absl::InvalidArgumentError(absl::StrCat("DDP_FLIGHT_RECORDER_ENTRIES=\"", *entries,
                                                     "\": expected an integer from 0 (off) to ",
                                                     kMaxFlightRecorderEntries));
    }
    options.entries = parsed;
  }
  if (std::optional<std::string> dir = env("DDP_FLIGHT_RECORDER_DIR"); dir.has_value()) {
    if (dir->empty()) return absl::InvalidArgumentError("DDP_FLIGHT_RECORDER_DIR is set but empty");
    options.dump_dir = *dir;
  }
  return options;
}

const char* FlightStateName(FlightState state) {
  switch (state) {
    case FlightState::kIssued: return "issued";
    case FlightState::kStarted: return "started";
    case FlightState::kCompleted: return "completed";
    case FlightState::kFailed: return "failed";
  }
  return "unknown";
}

FlightRecorder::FlightRecorder(int capacity) : capacity_(capacity) {
  DDP_CHECK(capacity >= 0 && capacity <= kMaxFlightRecorderEntries)
      << "FlightRecorder: capacity " << capacity << " outside 0.." << kMaxFlightRecorderEntries;
  absl::MutexLock lock(&mu_);
  ring_.resize(capacity);
}

std::shared_ptr<AsyncWork> FlightRecorder::Record(uint64_t sequence, const CollectiveSpec& spec,
                                                  std::shared_ptr<AsyncWork> work) {
  if (capacity_ == 0) return nullptr;
  Slot& slot = ring_[next_ % capacity_];
  slot.sequence = sequence;
  slot.spec = spec;
  slot.issued = WallNow();
  ++next_;
  return std::exchange(slot.work, std::move(work));
}

std::vector<FlightEntry> FlightRecorder::Snapshot(const AsyncWork* failing, absl::string_view failure) const {
  std::vector<FlightEntry> entries;
  absl::MutexLock lock(&mu_);
  const uint64_t kept = std::min<uint64_t>(next_, capacity_);
  entries.reserve(kept);
  for (uint64_t record = next_ - kept; record < next_; ++record) {
    const Slot& slot = ring_[record % capacity_];
    if (slot.work == nullptr) continue;
    FlightEntry entry;
    entry.record = record;
    entry.sequence = slot.sequence;
    entry.spec = slot.spec;
    entry.issued = slot.issued;
    entry.state = StateOf(*slot.work, &entry.error);
    entry.started = slot.work->StartTime();
    entry.ended = slot.work->EndTime();
    if (slot.work.get() == failing && entry.state != FlightState::kFailed) {
      entry.state = FlightState::kFailed;
      entry.error = std::string(failure);
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

void FlightRecorder::Clear() {
  std::vector<Slot> dropped(capacity_);
  absl::MutexLock lock(&mu_);
  ring_.swap(dropped);
  next_ = 0;
}

uint64_t FlightRecorder::recorded() const {
  absl::MutexLock lock(&mu_);
  return next_;
}

}  // namespace ddp
