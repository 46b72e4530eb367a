#include <immintrin.h>
#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/wall_clock.h"
#include "comm/shm/shm_channel.h"
#include "comm/shm/shm_channel_internal.h"

// How a ShmChannel waits for its peers' step words: spin, then sleep on the word's futex, checking the
// peers' liveness while asleep (the waiting part of Note [Shared-memory protocol] in shm_channel.cc).
//
// Note [Spinning while the process waits]
// A wait spins options.spin (30 µs) and then sleeps, because a collective that runs while its caller
// computes (a bucket reduced during backward) must leave the core to the computation. But when a thread
// of this process is blocked on one of the group's Works (ShmWork::Wait counts it in ShmWaiters), the
// core has nothing else of this process to run, and a sleeping rank is slow to come back: on a virtual
// machine an idle vCPU halts, and the peer's wake-up goes through the hypervisor. So while such a thread
// is blocked, a wait spins for spin_while_waited (5 ms) before it sleeps, and a wait already asleep is
// woken (ShmWaiters::Begin wakes the futex word it sleeps on) to spin. A wait spins long at most once; a
// Begin that races with the waiter falling asleep may be missed, and that wait then sleeps until the
// peer's Post, as without the waiter. Nor does a wait spin long while the CPUs are oversubscribed (Note
// [Spinning under contention]).
//
// Note [Spinning under contention]
// A spinning wait pays off only while the peer it waits for runs. When more threads want the CPUs than
// there are (another job, a compile, a busy loop), the peer may be the thread waiting for a CPU, and the
// spin holds the very CPU it needs, for up to spin_while_waited. So every wait asks CpuContention
// (comm/shm/cpu_contention.h) how it stands: while the host's runnable threads exceed the CPUs this
// process may use, a wait spins at most contended_spin after the 64 pauses before its first clock read,
// then sleeps on its futex, and ShmWaiters::Begin wakes no sleeping wait to spin. The count
// (/proc/loadavg, about a microsecond) is sampled at most once per sample interval per process, and only
// by a thread that is the one thread of its process running for the group: the inline caller, or the
// worker while the process's other threads are blocked on the group. The group then contributes about
// one runnable thread per rank (this one, and the peers it waits for, which are computing), so the count
// exceeds the CPUs only when something else wants them too. A worker that spins while its own process
// computes (buckets reduced during backward) would count that computation as well, and call a quiet
// machine oversubscribed: it reads the latest verdict but never samples. The verdict is a moving average
// of the samples (RunnableEstimate): one burst does not flip it, load that stays does within three
// samples, and it recovers as quickly once the load is gone. A group with more ranks than the CPUs this
// process may use oversubscribes them by itself and always spins contended_spin.
//

namespace ddp {

using shm_internal::FutexWait;
using shm_internal::FutexWakeAll;
using shm_internal::kInputElsewhereUrl;
using shm_internal::kNumWords;
using shm_internal::Reached;
using shm_internal::StepOf;

namespace {

const char* WordName(ShmWord word) {
  switch (word) {
    case ShmWord::kReady:
      return "post its input";
    case ShmWord::kReduced:
      return "post its reduced slice";
    case ShmWord::kDone:
      return "finish reading";
    case ShmWord::kInlineReady:
      return "post its (inline) input";
  }
  return "?";
}

}  // namespace

// A rank posts its inline input of step s + 1 only after it finished step s, so that word, which this
// rank read (and still caches) during step s + 1 when consecutive collectives are small, spares reading
// the kDone word that the peer rewrote since.
bool ShmChannel::FinishedStep(int peer, uint32_t step) const {
  return Reached(peers_[peer].word(ShmWord::kInlineReady, step + 1).load(std::memory_order_acquire), step + 1) ||
         Reached(peers_[peer].word(ShmWord::kDone, step).load(std::memory_order_acquire), step);
}

absl::Status ShmChannel::WaitSlotFree(uint32_t step, absl::Time deadline, ShmWhat what) {
  if (step <= 2) return absl::OkStatus();
  for (int q = 0; q < size_; ++q) {
    if (q != rank_ && !FinishedStep(q, step - 2)) DDP_RETURN_IF_ERROR(Wait(q, ShmWord::kDone, step - 2, deadline, what));
  }
  return absl::OkStatus();
}

absl::Status ShmChannel::WaitAll(ShmWord word, uint32_t step, absl::Time deadline, ShmWhat what) {
  for (int q = 0; q < size_; ++q) {
    if (q != rank_) DDP_RETURN_IF_ERROR(Wait(q, word, step, deadline, what));
  }
  return absl::OkStatus();
}

absl::Status ShmChannel::Wait(int peer, ShmWord word, uint32_t step, absl::Time deadline, ShmWhat what) {
  ShmStepWord& w = peers_[peer].word(word, step);
  if (SpinUntil(w, step, /*may_extend=*/true)) return absl::OkStatus();
  return Sleep(peer, word, step, deadline, what, /*spun_long=*/waiters_->Any());
}

bool ShmChannel::TrySpin(int peer, ShmWord word, uint32_t step) {
  return SpinUntil(peers_[peer].word(word, step), step, /*may_extend=*/false);
}

// The clock is read first after 64 pauses: a peer that arrives within them (the common case of
// back-to-back small collectives) costs no clock read. The budget is re-read at every clock read, so a
// thread that starts waiting on the group meanwhile extends it.
bool ShmChannel::SpinUntil(const ShmStepWord& w, uint32_t step, bool may_extend) const {
  if (Reached(w.load(std::memory_order_acquire), step)) return true;
  absl::Time start = absl::InfiniteFuture();
  bool extended = false;
  for (int i = 1;; ++i) {
    _mm_pause();
    if (Reached(w.load(std::memory_order_acquire), step)) return true;
    if (i % 64 != 0) continue;
    const absl::Time now = WallNow();
    if (i == 64) start = now;
    if (now - start >= SpinBudget(now, may_extend)) return false;
    if (!extended && now - start >= options_.spin) {
      extended = true;
      long_spins_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

absl::Duration ShmChannel::SpinBudget(absl::Time now, bool may_extend) const {
  if (oversubscribed_group_) return std::min(options_.spin, options_.contended_spin);
  const bool waited = may_extend && waiters_->Any();
  const bool contended = waited || !may_extend ? contention_->Sample(now) : contention_->oversubscribed();
  if (contended) return std::min(options_.spin, options_.contended_spin);
  return waited ? std::max(options_.spin, options_.spin_while_waited) : options_.spin;
}

bool ShmChannel::TrySpinAll(ShmWord word, uint32_t step) {
  for (int q = 0; q < size_; ++q) {
    if (q != rank_ && !TrySpin(q, word, step)) return false;
  }
  return true;
}

bool ShmChannel::TrySlotFree(uint32_t step) {
  if (step <= 2) return true;
  for (int q = 0; q < size_; ++q) {
    if (q != rank_ && !FinishedStep(q, step - 2) && !TrySpin(q, ShmWord::kDone, step - 2)) return false;
  }
  return true;
}

absl::Status ShmChannel::Sleep(int peer, ShmWord word, uint32_t step, absl::Time deadline, ShmWhat what,
                               bool spun_long) {
  ShmStepWord& w = peers_[peer].word(word, step);
  std::atomic<uint32_t>& sleepers = peers_[peer].control()->sleepers;
  absl::Time next_check = WallNow();
  // Checked before each sleep and before the peers' liveness, so that a peer that found the mismatch
  // first and broke the group is reported for the mismatch (Note [Call stamps] in comm/shm/call_stamp.h).
  const auto posted_elsewhere = [&] {
    absl::Status elsewhere = absl::FailedPreconditionError(
        absl::StrCat(what(), ": rank ", peer, " posted its input of step ", step, " as another kind of call"));
    elsewhere.SetPayload(kInputElsewhereUrl, absl::Cord(absl::StrCat(peer)));
    return elsewhere;
  };
  while (true) {
    if (PostedInputElsewhere(peer, word, step)) return posted_elsewhere();
    if (!spun_long && waiters_->Any()) {  // a thread began to wait on the group (and may have woken us)
      spun_long = true;
      if (SpinUntil(w, step, /*may_extend=*/true)) return absl::OkStatus();
    }
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    waiters_->SleepingOn(&w);
    const uint64_t seen = w.load(std::memory_order_seq_cst);
    if (!Reached(seen, step) && (spun_long || !waiters_->Any())) {
      sleeps_.fetch_add(1, std::memory_order_relaxed);
      const absl::Duration left = deadline - WallNow();
      FutexWait(&w, StepOf(seen), std::max(absl::ZeroDuration(), std::min(options_.liveness_interval, left)));
    }
    waiters_->SleepingOn(nullptr);
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
    const uint64_t now_value = w.load(std::memory_order_acquire);
    if (Reached(now_value, step)) return absl::OkStatus();
    const absl::Time now = WallNow();
    const bool check_processes = now >= next_check;
    if (check_processes) next_check = now + options_.liveness_interval;
    if (PostedInputElsewhere(peer, word, step)) return posted_elsewhere();
    if (std::string lost = CheckPeers(check_processes); !lost.empty()) {
      return absl::UnavailableError(absl::StrCat(what(), ": ", lost));
    }
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what(), ": timed out waiting for rank ", peer, " to ",
                                                      WordName(word), " for step ", step, " (rank ", peer,
                                                      " is at step ", StepOf(now_value), ")"));
    }
  }
}

std::string ShmChannel::CheckPeers(bool check_processes) {
  // Reports first: a peer that found the first loss wrote it into its abort word, which stays readable
  // after that peer itself exits (the mapping outlives it), so the rank lost first is named, not a
  // survivor that left after reporting it.
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const int32_t abort = peers_[q].control()->abort.load(std::memory_order_acquire);
    if (abort == 0) continue;
    Abort(abort >= 2 ? abort - 2 : -1);
    if (abort >= 2) return absl::StrCat("lost rank ", abort - 2, " (reported by rank ", q, ")");
    return absl::StrCat("rank ", q, " failed and left the group broken");
  }
  if (!check_processes) return "";
  for (int q = 0; q < size_; ++q) {
    const Peer& peer = peers_[q];
    if (q == rank_ || peer.pid == getpid()) continue;
    bool exited = false;
    if (peer.pidfd.valid()) {
      pollfd p{peer.pidfd.get(), POLLIN, 0};
      exited = poll(&p, 1, 0) > 0;
    } else {
      exited = kill(peer.pid, 0) != 0 && errno == ESRCH;
    }
    if (exited) {
      Abort(q);
      return absl::StrCat("lost rank ", q, " (process ", peer.pid, " exited)");
    }
  }
  return "";
}

void ShmChannel::Abort(int lost_rank) {
  Peer& self = peers_[rank_];
  int32_t expected = 0;
  self.control()->abort.compare_exchange_strong(expected, lost_rank >= 0 ? lost_rank + 2 : 1);
  for (int w = 0; w < kNumWords; ++w) FutexWakeAll(&self.control()->words[w].value);
  for (auto& area : self.control()->inline_input) FutexWakeAll(&area.step);
}

}  // namespace ddp
