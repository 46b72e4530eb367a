// The flight recorder's analyzer: reads the dumps every rank of a group wrote (comm/flight_recorder_dump.h)
// and says which rank is behind and in which call, where each rank stands, and where the ranks called
// different collectives. The command is //comm:flight_recorder_report:
//
//   bazel run //comm:flight_recorder_report -- /tmp/ddp-flight-recorder/20261203-043512-pid4711
//   bazel-bin/comm/flight_recorder_report            # the newest group under the default folder
//   bazel-bin/comm/flight_recorder_report --last=20 DIR
//
// DIR is a group's folder (the one a failed run's error names) or a folder of group folders (then the
// newest group is reported and the others are listed). Dumps collected from several hosts into one
// folder work as well (each rank's file has its own name).
#ifndef DDP_COMM_FLIGHT_RECORDER_REPORT_H_
#define DDP_COMM_FLIGHT_RECORDER_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/flight_recorder_dump.h"

namespace ddp {

struct FlightReportOptions {
  int last_calls = 5;  // recorded calls listed per rank, newest last; 0 lists none
};

// The report over `dumps` (any order; several groups are reported one after the other, by group id).
// Pure. REQUIRES: !dumps.empty().
std::string ReportFlightDumps(const std::vector<FlightDump>& dumps, const FlightReportOptions& options);

// Reads `dir` as the header says and reports. kNotFound naming `dir` when it holds no dump.
absl::StatusOr<std::string> ReportFlightDumpDir(const std::string& dir, const FlightReportOptions& options);

}  // namespace ddp

#endif  // DDP_COMM_FLIGHT_RECORDER_REPORT_H_
