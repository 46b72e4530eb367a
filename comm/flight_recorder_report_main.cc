// flight_recorder_report [--last=N] [DIR]: prints the flight recorder's diagnosis of the dumps in DIR
// (comm/flight_recorder_report.h). Without DIR: $DDP_FLIGHT_RECORDER_DIR, else
// ${TMPDIR:-/tmp}/ddp-flight-recorder, whose newest group is reported. A relative DIR is the caller's,
// also under `bazel run`. Exit codes: 0 a report was printed; 1 no dump could be read (the error names
// the folder or file); 2 bad usage.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "comm/flight_recorder_dump.h"
#include "comm/flight_recorder_report.h"

ABSL_FLAG(int, last, 5, "recorded calls listed per rank (newest last); 0 lists none");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("flight_recorder_report [--last=N] [DIR] (see comm/flight_recorder_report.h)");
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const int last = absl::GetFlag(FLAGS_last);
  if (args.size() > 2 || last < 0) {
    std::fprintf(stderr, "usage: flight_recorder_report [--last=N >= 0] [DIR]\n");
    return 2;
  }
  std::string dir;
  if (args.size() == 2) {
    dir = args[1];
    const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");  // `bazel run` runs in runfiles
    if (workspace != nullptr && !dir.empty() && dir[0] != '/') dir = std::string(workspace) + "/" + dir;
  } else {
    const char* configured = std::getenv("DDP_FLIGHT_RECORDER_DIR");
    dir = ddp::FlightDumpBaseDir(configured != nullptr ? configured : "");
  }
  ddp::FlightReportOptions options;
  options.last_calls = last;
  const absl::StatusOr<std::string> report = ddp::ReportFlightDumpDir(dir, options);
  if (!report.ok()) {
    std::fprintf(stderr, "flight_recorder_report: %s\n", std::string(report.status().message()).c_str());
    return 1;
  }
  std::fputs(report->c_str(), stdout);
  return 0;
}
