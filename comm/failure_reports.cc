#include "comm/failure_reports.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "store/store_keys.h"

namespace ddp {

// Note [Failure reports]
// A SIGKILLed rank's sockets are closed by its kernel, so the peers that exchange data with it fail at
// once ("Connection closed by peer"); the others would fail only later, when those peers give up, or at
// the collective timeout. Gloo's message names only the socket address of the peer this rank happened to
// talk to, which is often a survivor. So a rank whose collective fails (1) closes all its connections
// (ProcessGroupGloo), which makes every peer still waiting on it fail now, (2) writes a report under
// `<prefix><rank>` and (3) polls, at most `window`, for the other ranks' reports. Survivors all fail
// within a short time of each other (the failure cascades through the mesh), so they all report; the lost
// rank never does. Under ddprun the wait is usually much shorter: the launcher reaps a dead worker within
// ~20 ms and writes how it died under LauncherExitNoticeKey(rank) (store/store_keys.h), which accounts for
// that rank at once. The window is paid only on the error path.
// The reports live in the rendezvous store: under ddprun (env://) the store runs in the launcher and
// outlives any worker; with the store in rank 0, a lost rank 0 takes the reports with it, and the
// summary says so.

namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(20);

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

}  // namespace

std::string SummarizeFailureReports(int size, const FailureEvidence& evidence, absl::Duration window) {
  std::vector<std::string> lost;
  std::vector<int> silent, reported;
  for (int r = 0; r < size; ++r) {
    if (evidence.reports.count(r) != 0) {
      reported.push_back(r);
    } else if (auto notice = evidence.exit_notices.find(r); notice != evidence.exit_notices.end()) {
      lost.push_back(absl::StrCat("rank ", r, " (launcher: ", notice->second, ")"));
    } else {
      silent.push_back(r);
    }
  }
  if (!silent.empty()) {
    lost.push_back(absl::StrCat(RankList(silent), " (no report within ", absl::FormatDuration(window),
                                ": killed, crashed, hung or left early)"));
  }
  if (lost.empty()) return "[failure reports: every rank reported a failure, none was lost]";
  std::string summary = absl::StrCat("[failure reports: lost ", absl::StrJoin(lost, ", "));
  if (!reported.empty()) absl::StrAppend(&summary, "; ", RankList(reported), " failed too");
  return summary + "]";
}

FailureReports::FailureReports(Store* store, std::string key_prefix, int rank, int size, absl::Duration window,
                               int store_host_rank)
    : store_(store),
      key_prefix_(std::move(key_prefix)),
      rank_(rank),
      size_(size),
      window_(window),
      store_host_rank_(store_host_rank) {}

std::string FailureReports::Key(int rank) const { return absl::StrCat(key_prefix_, rank); }

bool FailureReports::Collect(FailureEvidence* evidence, std::string* store_error) {
  for (int r = 0; r < size_; ++r) {
    if (evidence->reports.count(r) != 0) continue;
    for (auto [key, into] : {std::pair{Key(r), &evidence->reports}, {LauncherExitNoticeKey(r), &evidence->exit_notices}}) {
      absl::StatusOr<std::string> value = store_->Get(key, absl::ZeroDuration());
      if (value.ok()) {
        (*into)[r] = *std::move(value);
      } else if (absl::IsUnavailable(value.status())) {  // the store itself is gone
        *store_error = std::string(value.status().message());
        return false;
      }
    }
  }
  return true;
}

std::string FailureReports::Unavailable(absl::string_view error) const {
  std::string summary = absl::StrCat("[failure reports unavailable: ", error);
  if (store_host_rank_ >= 0 && store_host_rank_ != rank_) {
    absl::StrAppend(&summary, "; rank ", store_host_rank_,
                    " serves the store, so it is gone or not responding (dead, stopped or cut off)");
  }
  return summary + "]";
}

std::string FailureReports::Report(const std::string& what, FailureEvidence* evidence) {
  absl::MutexLock lock(&mu_);
  if (!summary_.has_value()) summary_ = FirstReport(what);
  if (evidence != nullptr) *evidence = evidence_;
  return *summary_;
}

std::string FailureReports::FirstReport(const std::string& what) {
  if (absl::Status set = store_->Set(Key(rank_), what); !set.ok()) return Unavailable(set.message());
  const absl::Time deadline = absl::Now() + window_;
  while (true) {
    std::string store_error;
    if (!Collect(&evidence_, &store_error)) return Unavailable(store_error);
    int accounted = 0;
    for (int r = 0; r < size_; ++r) {
      accounted += evidence_.reports.count(r) != 0 || evidence_.exit_notices.count(r) != 0;
    }
    if (accounted == size_ || absl::Now() >= deadline) break;
    absl::SleepFor(std::min(kPollInterval, deadline - absl::Now()));
  }
  return SummarizeFailureReports(size_, evidence_, window_);
}

}  // namespace ddp
