// What the flight recorder concludes from the ranks' progress: where each rank stands in its group's
// issue order (RankProgress, from its recorded calls) and which rank is behind, in which call
// (DiagnoseProgress). Pure; used live, when a call fails or times out (comm/flight_recorder_postmortem.h),
// and offline, over the dumps (comm/flight_recorder_report.h).
#ifndef DDP_COMM_FLIGHT_RECORDER_DIAGNOSIS_H_
#define DDP_COMM_FLIGHT_RECORDER_DIAGNOSIS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "comm/flight_recorder.h"

namespace ddp {

// Where one rank stands in its group's issue order. Calls of one group complete in issue order, so
// "completed every call through #last_completed" is exact.
struct RankProgress {
  // The oldest numbered call the rank has not completed successfully.
  struct Call {
    uint64_t sequence = 0;
    std::string call;  // its signature, "AllReduce(sum) of 4 int64"
    FlightState state = FlightState::kIssued;  // kIssued, kStarted or kFailed
    absl::Duration age;  // since it was issued (kIssued) or started (kStarted, kFailed)
  };
  // The highest sequence number the rank completed; -1 when no completed call is recorded.
  int64_t last_completed = -1;
  // nullopt: every numbered call it issued completed (it is outside collectives now).
  std::optional<Call> pending;
};

// The progress `entries` (a recorder's snapshot, oldest first) show at time `now`. Unnumbered calls
// (Send, Recv) are left out: they have no place in the common order.
RankProgress ProgressOf(const std::vector<FlightEntry>& entries, absl::Time now);

// As one JSON object, and back (kInvalidArgument for text that is not one).
std::string EncodeProgress(const RankProgress& progress);
absl::StatusOr<RankProgress> DecodeProgress(absl::string_view text);

// What is known of a group of `size` ranks.
struct GroupProgress {
  int size = 1;
  // The ranks heard from (a report, a dump), with their progress; nullopt for a rank that recorded
  // nothing (its recorder is off).
  std::map<int, std::optional<RankProgress>> heard;
  // Ranks not heard from whose launcher reported how they ended ("exit code 137 (signal 9)").
  std::map<int, std::string> exited;
  // Why the other ranks count as silent, e.g. "no progress report within 3s" or "no dump".
  std::string silence = "no progress report";
};

// Which rank is behind and in which call, e.g.
//   "rank 1 is behind: no progress report within 3s from rank 1 (stopped, hung, or busy outside
//    collectives); it has not completed AllReduce(sum) #252 of 4 int64, which rank 0 is in (running for
//    5.0s, after completing every call through #251)"
//   "rank 2 is behind: it is in Broadcast(root 0) #251 of 10 float32 (running for 5.1s), while ranks 0, 1
//    are in AllReduce(sum) #252 of 4 int64 (running for 5.0s)"
//   "no rank is behind: ranks 0, 1 are in AllReduce(sum) #252 of 4 int64 (running for 5.0s)"
//   "no rank is behind, but the ranks called different collectives at #3: rank 0 AllReduce(sum) of 4
//    float32, rank 1 Broadcast(root 0) of 4 float32"
// Pure. REQUIRES: progress.size >= 1.
std::string DiagnoseProgress(const GroupProgress& progress);

// One rank's progress on its own, e.g. "rank 1 is in AllReduce(sum) #58 of 4 float32 (running for 0.1s),
// after completing every call through #57" or "rank 1 is past #57 with nothing issued since (busy
// outside collectives)". Pure.
std::string DescribeRankProgress(int rank, const RankProgress& progress);

// "rank 1" or "ranks 0, 2".
std::string NameRanks(const std::vector<int>& ranks);

}  // namespace ddp

#endif  // DDP_COMM_FLIGHT_RECORDER_DIAGNOSIS_H_
