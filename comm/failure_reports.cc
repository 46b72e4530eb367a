#include "comm/failure_reports.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace ddp {

// Note [Failure reports]
// A SIGKILLed rank's sockets are closed by its kernel, so the peers that exchange data with it fail at
// once ("Connection closed by peer"); the others fail a moment later, when those peers give up and close
// their own connections, or at the collective timeout. Gloo's message names only the socket address of
// the peer this rank happened to talk to, which is often a survivor. So every rank whose collective
// fails first writes a report under `<prefix><rank>` and then waits, at most `window`, for the other
// ranks' reports. Survivors all fail within a short time of each other (the failure cascades through the
// mesh), so they all report; the lost rank never does. The window is paid only on the error path.
// The reports live in the rendezvous store: under ddprun (env://) the store runs in the launcher and
// outlives any worker; with the store in rank 0, a lost rank 0 takes the reports with it, and the
// summary says so.

namespace {

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

}  // namespace

std::string SummarizeFailureReports(int size, const std::map<int, std::string>& reports, absl::Duration window) {
  std::vector<int> silent, reported;
  for (int r = 0; r < size; ++r) (reports.count(r) != 0 ? reported : silent).push_back(r);
  std::string summary = "[failure reports: ";
  if (silent.empty()) {
    absl::StrAppend(&summary, "every rank reported a failure, none was lost]");
    return summary;
  }
  absl::StrAppend(&summary, "lost ", RankList(silent), " (no report within ", absl::FormatDuration(window),
                  ": killed, crashed, hung or left early)");
  if (!reported.empty()) absl::StrAppend(&summary, "; ", RankList(reported), " failed too");
  absl::StrAppend(&summary, "]");
  return summary;
}

FailureReports::FailureReports(Store* store, std::string key_prefix, int rank, int size, absl::Duration window)
    : store_(store), key_prefix_(std::move(key_prefix)), rank_(rank), size_(size), window_(window) {}

std::string FailureReports::Key(int rank) const { return absl::StrCat(key_prefix_, rank); }

std::string FailureReports::Report(const std::string& what) {
  absl::MutexLock lock(&mu_);
  if (summary_.has_value()) return *summary_;
  if (absl::Status set = store_->Set(Key(rank_), what); !set.ok()) {
    summary_ = absl::StrCat("[failure reports unavailable: ", set.message(), "]");
    return *summary_;
  }
  std::map<int, std::string> reports = {{rank_, what}};
  const absl::Time deadline = absl::Now() + window_;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    absl::StatusOr<std::string> report = store_->Get(Key(r), std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (report.ok()) {
      reports[r] = *std::move(report);
    } else if (absl::IsUnavailable(report.status())) {  // the store itself is gone
      summary_ = absl::StrCat("[failure reports unavailable: ", report.status().message(), "]");
      return *summary_;
    }
  }
  summary_ = SummarizeFailureReports(size_, reports, window_);
  return *summary_;
}

}  // namespace ddp
