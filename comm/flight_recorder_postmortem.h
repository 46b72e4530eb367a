// GroupPostmortem: what a queued group does, once, when one of its calls fails or times out. It writes
// this rank's flight-recorder dump (comm/flight_recorder_dump.h), exchanges a report (the error, the
// call, this rank's progress) with the other ranks through the store with a bounded wait
// (comm/failure_reports.h), and names the rank that is behind and the call it has not completed
// (comm/flight_recorder_diagnosis.h), so that the first error a user sees says why the group hangs. See
// Note [Hang postmortem] in the .cc.
#ifndef DDP_COMM_FLIGHT_RECORDER_POSTMORTEM_H_
#define DDP_COMM_FLIGHT_RECORDER_POSTMORTEM_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/collective_call.h"
#include "comm/failure_reports.h"
#include "comm/flight_recorder.h"
#include "store/store.h"

namespace ddp {

// How a group's postmortem works; every field has a default that records, dumps and exchanges nothing
// beyond what the group gives it.
struct PostmortemOptions {
  // The recorder's size and dump folder. nullopt: from DDP_FLIGHT_RECORDER_ENTRIES and
  // DDP_FLIGHT_RECORDER_DIR (FlightRecorderOptionsFromEnv; an invalid value is reported on stderr once
  // and the defaults are used: a backend that wants the error validates the variables in its factory).
  std::optional<FlightRecorderOptions> recorder;
  // The same on every rank of the group (AgreeFlightGroupId); names the dump folder. "": a name from the
  // backend alone ("<backend>-group"), which the ranks of one host share with every other such group.
  std::string group_id;
  // Where the ranks exchange reports; not owned, must outlive the group. null: no exchange (the error
  // then names only this rank's progress).
  Store* store = nullptr;
  // The keys of the reports in `store`: "<prefix><rank>".
  std::string report_key_prefix = "flight_recorder/report/";
  // How long the exchange waits for the other ranks' reports (DDP_FAILURE_REPORT_WINDOW_S).
  absl::Duration window = absl::Seconds(3);
  // The rank whose process serves `store`, -1 for none (FailureReports).
  int store_host_rank = -1;
};

// What the postmortem adds to an error.
struct PostmortemResult {
  // " [failure reports: ...] [flight recorder: ...]" (the first part only with a store).
  std::string text;
  // The calls the ranks that reported were in when they failed (this rank's included), for
  // DescribeCallMismatch (comm/collective_call.h).
  std::map<int, CollectiveCall> calls;
};

// Thread-safe. Shared by a group and its Works (a Work whose wait times out explains it).
class GroupPostmortem {
 public:
  // For rank `rank` of a `size`-rank group of `backend` (a string literal) whose calls are bounded by
  // `timeout`. REQUIRES: 0 <= rank < size.
  GroupPostmortem(const char* backend, int rank, int size, absl::Duration timeout, PostmortemOptions options);

  // The group's recorder (disabled, capacity 0, when DDP_FLIGHT_RECORDER_ENTRIES=0; its mu() is the
  // group's issue lock either way). Never null; lives as long as this object.
  FlightRecorder* recorder() const { return recorder_.get(); }

  // The first call: dumps (unless Dump did), sends this rank's report ({`error`, `call`, its progress})
  // and waits at most the window for the others', then returns what the ranks' reports show. Later
  // calls return the first result at once: after the first failure the ranks no longer agree on where
  // they stand, and the first failure is the cause. After Detach, an explanation not made yet uses no
  // store. Blocks at most the window plus one store timeout.
  // `failing`: the Work of the call whose body fails with `error` now (null for a wait that timed out).
  PostmortemResult Explain(const std::string& error, const std::optional<CollectiveCall>& call,
                           const AsyncWork* failing = nullptr);

  // Writes this rank's dump with `reason` unless it was written already; no exchange. For failures whose
  // error the backend explains itself; `failing` as for Explain.
  void Dump(const std::string& reason, const AsyncWork* failing = nullptr);

  // Forgets the store (the group is going away and the store may go before its Works); waits for an
  // Explain in progress.
  void Detach();

 private:
  // Writes the dump of `snapshot` once; returns the folder it went to ("" when nothing was written).
  std::string DumpOnce(const std::string& reason, const std::vector<FlightEntry>& snapshot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PostmortemResult ExplainFirst(const std::string& error, const std::optional<CollectiveCall>& call,
                                const AsyncWork* failing) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const char* const backend_;
  const int rank_;
  const int size_;
  const absl::Duration timeout_;
  const PostmortemOptions options_;
  const FlightRecorderOptions recorder_options_;
  const std::unique_ptr<FlightRecorder> recorder_;

  absl::Mutex mu_;
  std::unique_ptr<FailureReports> reports_ ABSL_GUARDED_BY(mu_);  // null without a store, or detached
  bool dumped_ ABSL_GUARDED_BY(mu_) = false;
  std::string dump_note_ ABSL_GUARDED_BY(mu_);  // where the dump went, or why it failed
  std::optional<PostmortemResult> result_ ABSL_GUARDED_BY(mu_);
};

// The id every rank of a group dumps under: rank 0 writes one (its start time and process id) into
// `store`, the others read it, waiting at most `timeout`. Call it during the group's rendezvous.
absl::StatusOr<std::string> AgreeFlightGroupId(Store& store, int rank, absl::Duration timeout);

}  // namespace ddp

#endif  // DDP_COMM_FLIGHT_RECORDER_POSTMORTEM_H_
