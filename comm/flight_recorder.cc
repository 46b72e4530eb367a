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
// the Work: the ring keeps a call's Work while the call runs, and once it completed, the next Record
// copies its outcome (AsyncWork::CompletedOutcome, no lock) into the entry and lets the Work go. Calls
// of a group complete in issue order, so the calls still holding a Work are the newest ones, and each
// Record resolves about one. Keeping every Work until its entry is overwritten would be simpler, but it
// measured +0.25 us per 4-byte shared-memory all-reduce (0.7 us): 2000 live Works defeat the allocator's
// per-thread cache and the CPU's. The issue lock is the recorder's own mutex (mu()), which the group
// takes to number a call anyway, so recording takes no lock of its own (BENCHMARKS.md, section Flight
// recorder, measures the whole against DDP_FLIGHT_RECORDER_ENTRIES=0).

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

void FlightRecorder::ResolveCompleted() {
  resolved_ = std::max(resolved_, next_ - std::min<uint64_t>(next_, capacity_));  // older ones are gone
  for (; resolved_ < next_; ++resolved_) {
    Slot& slot = ring_[resolved_ % capacity_];
    absl::Status status;
    if (!slot.work->CompletedOutcome(&status, &slot.started, &slot.ended)) return;
    slot.state = status.ok() ? FlightState::kCompleted : FlightState::kFailed;
    if (!status.ok()) slot.error = std::string(status.message());
    slot.work.reset();
  }
}

void FlightRecorder::Record(uint64_t sequence, const CollectiveSpec& spec, std::shared_ptr<AsyncWork> work) {
  if (capacity_ == 0) return;
  ResolveCompleted();
  Slot& slot = ring_[next_ % capacity_];
  slot.sequence = sequence;
  slot.spec = spec;
  slot.issued = WallNow();
  slot.work = std::move(work);  // an unresolved Work overwritten here (a ring of running calls) is let go
  slot.state = FlightState::kIssued;
  slot.started = slot.ended = absl::InfinitePast();
  slot.error.clear();
  ++next_;
}

std::vector<FlightEntry> FlightRecorder::Snapshot(const AsyncWork* failing, absl::string_view failure) const {
  std::vector<FlightEntry> entries;
  absl::MutexLock lock(&mu_);
  const uint64_t kept = std::min<uint64_t>(next_, capacity_);
  entries.reserve(kept);
  for (uint64_t record = next_ - kept; record < next_; ++record) {
    const Slot& slot = ring_[record % capacity_];
    FlightEntry entry;
    entry.record = record;
    entry.sequence = slot.sequence;
    entry.spec = slot.spec;
    entry.issued = slot.issued;
    entry.state = slot.state;
    entry.started = slot.started;
    entry.ended = slot.ended;
    entry.error = slot.error;
    if (slot.work != nullptr) {  // unresolved: ask the Work
      entry.state = StateOf(*slot.work, &entry.error);
      entry.started = slot.work->StartTime();
      entry.ended = slot.work->EndTime();
    }
    if (slot.work != nullptr && slot.work.get() == failing && entry.state != FlightState::kFailed) {
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
  resolved_ = 0;
}

uint64_t FlightRecorder::recorded() const {
  absl::MutexLock lock(&mu_);
  return next_;
}

}  // namespace ddp
