#include "comm/flight_recorder.h"

#include <time.h>

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"

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
// per-thread cache and the CPU's. Issue times come from the coarse clock (CLOCK_REALTIME_COARSE, 1-4 ms):
// they say how long a call waited in the queue, while its start and end times, from its Work, are exact.
// For the same reason as above an entry is one cache line (the spec packed,
// times as integers, the rare error kept apart), and Record prefetches the next one: the slot a call
// writes was last touched N calls ago, and on a busy machine it comes from memory. The issue lock is
// the recorder's own mutex (mu()), which the group takes to number a call anyway, so recording takes no
// lock of its own (BENCHMARKS.md, section Flight recorder, measures the whole against
// DDP_FLIGHT_RECORDER_ENTRIES=0).

namespace {

// The wall clock at its last tick (1-4 ms resolution), for issue times: about 8 ns a read here against
// WallNow's 30-35 ns, and it never runs ahead of the exact clock, so a call is never shown issued after
// it started.
int64_t CoarseNowNanos() {
  timespec now;
  clock_gettime(CLOCK_REALTIME_COARSE, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

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
  works_.resize(capacity);
}

void FlightRecorder::ResolveCompleted() {
  // Records older than the ring's capacity are gone (overwritten while unresolved: a ring of running calls).
  resolved_ = std::max(resolved_, next_ - std::min<uint64_t>(next_, capacity_));
  for (; resolved_ < next_; ++resolved_) {
    std::shared_ptr<AsyncWork>& work = works_[resolved_ % capacity_];
    Slot& slot = ring_[resolved_ % capacity_];
    absl::Status status;
    absl::Time started, ended;
    if (!work->CompletedOutcome(&status, &started, &ended)) return;
    slot.started_ns = absl::ToUnixNanos(started);
    slot.ended_ns = absl::ToUnixNanos(ended);
    slot.state = status.ok() ? FlightState::kCompleted : FlightState::kFailed;
    if (!status.ok()) errors_[resolved_] = std::string(status.message());
    work.reset();
  }
}

void FlightRecorder::Record(uint64_t sequence, const CollectiveSpec& spec, std::shared_ptr<AsyncWork> work) {
  if (capacity_ == 0) return;
  ResolveCompleted();
  const size_t at = next_ % capacity_;
  Slot& slot = ring_[at];
  slot.sequence = sequence;
  slot.numel = spec.numel;
  slot.issued_ns = CoarseNowNanos();
  slot.started_ns = slot.ended_ns = 0;
  slot.root = spec.root;
  slot.tag = spec.tag;
  slot.kind = spec.kind;
  slot.op = static_cast<uint8_t>(spec.op);
  slot.dtype = static_cast<uint8_t>(spec.dtype);
  slot.state = FlightState::kIssued;
  works_[at] = std::move(work);  // an unresolved Work overwritten here (a ring of running calls) is let go
  if (!errors_.empty() && next_ >= static_cast<uint64_t>(capacity_)) errors_.erase(next_ - capacity_);
  ++next_;
  // The next call's slot was last touched `capacity_` calls ago and is likely out of the cache: fetch it
  // now, while this call runs, rather than when the next one is issued.
  __builtin_prefetch(&ring_[next_ % capacity_], /*rw=*/1);
  __builtin_prefetch(&works_[next_ % capacity_], /*rw=*/1);
}

FlightEntry FlightRecorder::EntryOf(uint64_t record, const AsyncWork* failing, absl::string_view failure) const {
  const Slot& slot = ring_[record % capacity_];
  auto time = [](int64_t ns) { return ns == 0 ? absl::InfinitePast() : absl::FromUnixNanos(ns); };
  FlightEntry entry;
  entry.record = record;
  entry.sequence = slot.sequence;
  entry.spec.kind = slot.kind;
  entry.spec.op = static_cast<ReduceOp>(slot.op);
  entry.spec.dtype = static_cast<DType>(slot.dtype);
  entry.spec.root = slot.root;
  entry.spec.tag = slot.tag;
  entry.spec.numel = slot.numel;
  entry.issued = time(slot.issued_ns);
  entry.state = slot.state;
  entry.started = time(slot.started_ns);
  entry.ended = time(slot.ended_ns);
  if (auto error = errors_.find(record); error != errors_.end()) entry.error = error->second;
  const std::shared_ptr<AsyncWork>& work = works_[record % capacity_];
  if (record >= resolved_ && work != nullptr) {  // unresolved: ask the Work
    entry.state = StateOf(*work, &entry.error);
    entry.started = work->StartTime();
    entry.ended = work->EndTime();
    if (work.get() == failing && entry.state != FlightState::kFailed) {
      entry.state = FlightState::kFailed;
      entry.error = std::string(failure);
    }
  }
  return entry;
}

std::vector<FlightEntry> FlightRecorder::Snapshot(const AsyncWork* failing, absl::string_view failure) const {
  std::vector<FlightEntry> entries;
  absl::MutexLock lock(&mu_);
  const uint64_t kept = std::min<uint64_t>(next_, capacity_);
  entries.reserve(kept);
  for (uint64_t record = next_ - kept; record < next_; ++record) entries.push_back(EntryOf(record, failing, failure));
  return entries;
}

void FlightRecorder::Clear() {
  std::vector<std::shared_ptr<AsyncWork>> dropped(capacity_);
  absl::MutexLock lock(&mu_);
  works_.swap(dropped);
  ring_.assign(capacity_, Slot());
  errors_.clear();
  next_ = 0;
  resolved_ = 0;
}

uint64_t FlightRecorder::recorded() const {
  absl::MutexLock lock(&mu_);
  return next_;
}

}  // namespace ddp
