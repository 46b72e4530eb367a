// Failure reports: when a collective fails, each rank that notices writes a short report into the
// group's rendezvous store and reads the others'. The rank that never reports is the one that was lost
// (killed, crashed, hung, or gone early), so every survivor's error can name it, where Gloo alone only
// names a socket address ("Connection closed by peer [10.0.0.7]:41234"). Under ddprun the launcher also
// records how a worker died (store/store_keys.h), which names the lost rank at once. See Note [Failure
// reports].
#ifndef DDP_COMM_FAILURE_REPORTS_H_
#define DDP_COMM_FAILURE_REPORTS_H_

#include <map>
#include <optional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "store/store.h"

namespace ddp {

// What arrived from the group (rank -> text): the ranks' own reports (this rank's included) and the
// launcher's exit notices.
struct FailureEvidence {
  std::map<int, std::string> reports;
  std::map<int, std::string> exit_notices;
};

// The diagnosis appended to a failed collective's error in a group of `size`. Pure. Ranks with an exit
// notice and no report are lost, with the notice; ranks with neither are lost "with no report within
// `window`". E.g. "[failure reports: lost rank 2 (launcher: exit code 137 (signal 9)); ranks 0, 1, 3
// failed too]" or "[failure reports: lost rank 2 (no report within 3s: killed, crashed, hung or left
// early); ranks 0, 1, 3 failed too]". REQUIRES: size >= 1.
std::string SummarizeFailureReports(int size, const FailureEvidence& evidence, absl::Duration window);

// Publishes this rank's report and collects the group's. Thread-safe.
class FailureReports {
 public:
  // `store` (not owned) must outlive this object; `key_prefix` separates groups sharing a store (the
  // launcher's notices are read at LauncherExitNoticeKey(rank) of `store` itself). `window` bounds how
  // long Report waits for the other ranks. `store_host_rank`: the rank whose process serves the store
  // (rank 0 under tcp:// or env:// without ddprun's store), so that an unreachable store names it; -1
  // when no rank does (ddprun's store, a file store) or it is unknown.
  FailureReports(Store* store, std::string key_prefix, int rank, int size, absl::Duration window,
                 int store_host_rank = -1);

  // On the first call: writes `what` as this rank's report, then polls the store until every other
  // rank has a report or an exit notice, or `window` passed, and returns SummarizeFailureReports of what
  // arrived; `evidence`, when given, receives the reports and notices themselves. Later calls return
  // the first summary and evidence at once (a broken group fails every later collective too). Store
  // errors (e.g. the store lived in the lost rank) give a summary that says the reports were unavailable
  // and, with a store_host_rank, that this rank is gone or not responding; the first store error ends
  // the exchange, so an unreachable store costs one store timeout, not one per key.
  std::string Report(const std::string& what, FailureEvidence* evidence = nullptr);

 private:
  std::string Key(int rank) const;
  // One pass over the ranks not heard of yet. Returns false when the store is unavailable.
  bool Collect(FailureEvidence* evidence, std::string* store_error);
  // The summary when the store failed with `error`.
  std::string Unavailable(absl::string_view error) const;
  // The first summary, computed under mu_.
  std::string FirstReport(const std::string& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store* store_;
  const std::string key_prefix_;
  const int rank_;
  const int size_;
  const absl::Duration window_;
  const int store_host_rank_;
  absl::Mutex mu_;
  std::optional<std::string> summary_ ABSL_GUARDED_BY(mu_);
  FailureEvidence evidence_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddp

#endif  // DDP_COMM_FAILURE_REPORTS_H_
