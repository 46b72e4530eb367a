// The flight recorder's dump: one rank's recorded calls (comm/flight_recorder.h) as self-describing JSON
// lines, written when a call of its group fails or times out, read back by the report command
// (comm/flight_recorder_report.h). Note [Flight recorder dumps] in the .cc gives the format and where the
// files go.
#ifndef DDP_COMM_FLIGHT_RECORDER_DUMP_H_
#define DDP_COMM_FLIGHT_RECORDER_DUMP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "comm/flight_recorder.h"

namespace ddp {

// Who wrote a dump, when and why: the dump's first line.
struct FlightDumpHeader {
  std::string group_id;  // the same on every rank of one group (AgreeFlightGroupId); names its folder
  std::string backend;   // "gloo", "shm", ...
  int rank = 0;
  int size = 1;
  std::string host;      // gethostname()
  int64_t pid = 0;
  absl::Time dumped_at = absl::InfinitePast();
  absl::Duration timeout;  // the group's collective timeout
  int capacity = 0;        // the recorder's entries (DDP_FLIGHT_RECORDER_ENTRIES)
  uint64_t recorded = 0;   // calls recorded in all; the dump holds the newest `capacity` of them
  std::string reason;      // the error that made the rank dump
};

// A whole dump.
struct FlightDump {
  FlightDumpHeader header;
  std::vector<FlightEntry> entries;  // oldest first
};

// The dump as JSON lines: the header, then one line per entry. Pure.
std::string EncodeFlightDump(const FlightDump& dump);
// The inverse. kInvalidArgument naming `source` (e.g. the file) and the line number for text that is not
// a dump of this format and version.
absl::StatusOr<FlightDump> DecodeFlightDump(absl::string_view text, absl::string_view source);

// The folder that holds group folders: `configured` when not empty (FlightRecorderOptions::dump_dir,
// which DDP_FLIGHT_RECORDER_DIR sets), else ${TMPDIR:-/tmp}/ddp-flight-recorder.
std::string FlightDumpBaseDir(const std::string& configured);
// Where rank `rank` of group `group_id` dumps: "<base>/<group_id>/rank<rank>.jsonl".
std::string FlightDumpPath(const std::string& base, const std::string& group_id, int rank);

// Writes `dump` to `path`, creating the missing folders on its way, all or nothing (io/file.h's
// WriteFileAtomically). Refuses, naming it, a path that exists and is not a regular file.
absl::Status WriteFlightDump(const std::string& path, const FlightDump& dump);

// Every dump ("*.jsonl") directly in folder `dir`, by rank. Files that are not dumps fail the read,
// naming the file.
absl::StatusOr<std::vector<FlightDump>> ReadFlightDumps(const std::string& dir);

}  // namespace ddp

#endif  // DDP_COMM_FLIGHT_RECORDER_DUMP_H_
