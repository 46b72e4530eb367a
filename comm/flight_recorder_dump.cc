#include "comm/flight_recorder_dump.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "io/file.h"
#include "nlohmann/json.hpp"

namespace ddp {

// Note [Flight recorder dumps]
// Where: rank r of a group dumps into "<base>/<group id>/rank<r>.jsonl". The base is
// FlightRecorderOptions::dump_dir, else DDP_FLIGHT_RECORDER_DIR, else ${TMPDIR:-/tmp}/ddp-flight-recorder:
// a temporary folder, as PyTorch's /tmp/nccl_trace_rank_<r>, because a dump matters only until someone
// reads it and a job's output folder is the train program's business, not the process group's. The
// group id is agreed through the store when the group is created (AgreeFlightGroupId: the time and
// rank 0's process id), so the ranks of one job share a folder and two jobs never mix their dumps,
// which PyTorch's fixed file names do; the error that announces a dump names its folder.
// What: JSON lines, one object per line, so a truncated file still shows its first calls and `grep`
// works. The first line is the header (FlightDumpHeader) with "format": "ddp-flight-recorder", "version"
// and "fields", which says what every entry field means: the file explains itself without this source.
// Each later line is one call, oldest first. "seq" is the group's sequence number (null for Send and
// Recv), the same call on every rank: the report matches calls across ranks by it. Times are
// microseconds since the Unix epoch (null: not yet), from each host's clock.

namespace {

using nlohmann::json;
using nlohmann::ordered_json;  // writes keys in the order given: "format" first, as a reader expects

constexpr char kFormat[] = "ddp-flight-recorder";
constexpr int kVersion = 1;

ordered_json Micros(absl::Time t) {
  if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) return nullptr;
  return absl::ToUnixMicros(t);
}

absl::Time FromMicros(const json& value) {
  return value.is_number_integer() ? absl::FromUnixMicros(value.get<int64_t>()) : absl::InfinitePast();
}

ordered_json FieldGuide() {
  return {{"record", "the recorder's own count of calls (Send and Recv included), from 0"},
          {"seq", "the group's sequence number: the same call on every rank; null for Send and Recv"},
          {"call", "the call and what it moves per rank, as errors name it"},
          {"kind", "the ProcessGroup method"},
          {"op", "the reduce op (AllReduce, ReduceScatter, Reduce)"},
          {"root", "the root (Broadcast, Reduce, Gather, Scatter) or peer (Send, Recv); -1 for none"},
          {"numel", "elements per rank"},
          {"bytes", "bytes per rank"},
          {"state", "issued (queued), started, completed or failed, when the dump was written"},
          {"issued_us", "when the caller issued it: microseconds since the Unix epoch"},
          {"started_us", "when its body started (null: not yet)"},
          {"ended_us", "when it finished (null: not yet)"},
          {"error", "why it failed (state failed)"}};
}

ordered_json EncodeEntry(const FlightEntry& e) {
  return {{"record", e.record},
          {"seq", e.sequence == kUnnumbered ? ordered_json(nullptr) : ordered_json(e.sequence)},
          {"call", e.spec.Signature()},
          {"kind", CollectiveKindName(e.spec.kind)},
          {"op", ReduceOpName(e.spec.op)},
          {"root", e.spec.root},
          {"tag", e.spec.tag},
          {"numel", e.spec.numel},
          {"dtype", DTypeName(e.spec.dtype)},
          {"bytes", e.spec.numel * static_cast<int64_t>(ElementSize(e.spec.dtype))},
          {"state", FlightStateName(e.state)},
          {"issued_us", Micros(e.issued)},
          {"started_us", Micros(e.started)},
          {"ended_us", Micros(e.ended)},
          {"error", e.error}};
}

// The enum value whose name `name(value)` gives `text`, among values 0..count-1.
template <typename Enum, typename NameFn>
std::optional<Enum> EnumNamed(const std::string& text, int count, NameFn name) {
  for (int i = 0; i < count; ++i) {
    if (text == name(static_cast<Enum>(i))) return static_cast<Enum>(i);
  }
  return std::nullopt;
}

absl::Status BadLine(absl::string_view source, int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ":", line, ": not a flight recorder dump (", what, ")"));
}

absl::StatusOr<FlightEntry> DecodeEntry(const json& j, absl::string_view source, int line) {
  FlightEntry e;
  if (!j.is_object() || !j.contains("record") || !j.contains("kind") || !j.contains("state")) {
    return BadLine(source, line, "an entry needs record, kind and state");
  }
  try {
    e.record = j.at("record").get<uint64_t>();
    e.sequence = j.value("seq", json(nullptr)).is_null() ? kUnnumbered : j.at("seq").get<uint64_t>();
    const std::optional<CollectiveKind> kind = EnumNamed<CollectiveKind>(
        j.at("kind").get<std::string>(), static_cast<int>(CollectiveKind::kMonitoredBarrier) + 1, CollectiveKindName);
    const std::optional<ReduceOp> op =
        EnumNamed<ReduceOp>(j.value("op", "sum"), static_cast<int>(ReduceOp::kProduct) + 1, ReduceOpName);
    const std::optional<DType> dtype =
        EnumNamed<DType>(j.value("dtype", "float32"), static_cast<int>(DType::kBFloat16) + 1, DTypeName);
    const std::optional<FlightState> state = EnumNamed<FlightState>(
        j.at("state").get<std::string>(), static_cast<int>(FlightState::kFailed) + 1, FlightStateName);
    if (!kind || !op || !dtype || !state) return BadLine(source, line, "unknown kind, op, dtype or state");
    e.spec.kind = *kind;
    e.spec.op = *op;
    e.spec.dtype = *dtype;
    e.state = *state;
    e.spec.root = j.value("root", -1);
    e.spec.tag = j.value("tag", 0);
    e.spec.numel = j.value("numel", int64_t{0});
    e.issued = FromMicros(j.value("issued_us", json(nullptr)));
    e.started = FromMicros(j.value("started_us", json(nullptr)));
    e.ended = FromMicros(j.value("ended_us", json(nullptr)));
    e.error = j.value("error", "");
  } catch (const json::exception& error) {
    return BadLine(source, line, error.what());
  }
  return e;
}

absl::StatusOr<FlightDumpHeader> DecodeHeader(const json& j, absl::string_view source) {
  if (!j.is_object() || j.value("format", "") != kFormat) return BadLine(source, 1, "no \"format\" header");
  if (j.value("version", 0) != kVersion) {
    return BadLine(source, 1, absl::StrCat("version ", j.value("version", 0), ", this reader knows ", kVersion));
  }
  FlightDumpHeader h;
  try {
    h.group_id = j.at("group_id").get<std::string>();
    h.backend = j.value("backend", "");
    h.rank = j.at("rank").get<int>();
    h.size = j.at("size").get<int>();
    h.host = j.value("host", "");
    h.pid = j.value("pid", int64_t{0});
    h.dumped_at = FromMicros(j.value("dumped_at_us", json(nullptr)));
    h.timeout = absl::Milliseconds(j.value("timeout_ms", int64_t{0}));
    h.capacity = j.value("capacity", 0);
    h.recorded = j.value("recorded", uint64_t{0});
    h.reason = j.value("reason", "");
  } catch (const json::exception& error) {
    return BadLine(source, 1, error.what());
  }
  if (h.size < 1 || h.rank < 0 || h.rank >= h.size) {
    return BadLine(source, 1, absl::StrCat("rank ", h.rank, " outside a group of ", h.size));
  }
  return h;
}

// Creates `dir` and the folders above it that are missing.
absl::Status MakeDirectories(const std::string& dir) {
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string prefix = dir.substr(0, slash);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return FileError("create directory", prefix, errno);
    }
    if (slash == std::string::npos) return absl::OkStatus();
  }
}

}  // namespace

std::string EncodeFlightDump(const FlightDump& dump) {
  const FlightDumpHeader& h = dump.header;
  const ordered_json header = {{"format", kFormat},
                       {"version", kVersion},
                       {"group_id", h.group_id},
                       {"backend", h.backend},
                       {"rank", h.rank},
                       {"size", h.size},
                       {"host", h.host},
                       {"pid", h.pid},
                       {"dumped_at_us", Micros(h.dumped_at)},
                       {"timeout_ms", absl::ToInt64Milliseconds(h.timeout)},
                       {"capacity", h.capacity},
                       {"recorded", h.recorded},
                       {"entries", dump.entries.size()},
                       {"reason", h.reason},
                       {"fields", FieldGuide()}};
  std::string text = header.dump() + "\n";
  for (const FlightEntry& entry : dump.entries) absl::StrAppend(&text, EncodeEntry(entry).dump(), "\n");
  return text;
}

absl::StatusOr<FlightDump> DecodeFlightDump(absl::string_view text, absl::string_view source) {
  FlightDump dump;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    ++line_number;
    const json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return BadLine(source, line_number, "a line is not JSON");
    if (line_number == 1) {
      absl::StatusOr<FlightDumpHeader> header = DecodeHeader(j, source);
      if (!header.ok()) return header.status();
      dump.header = *std::move(header);
      continue;
    }
    absl::StatusOr<FlightEntry> entry = DecodeEntry(j, source, line_number);
    if (!entry.ok()) return entry.status();
    dump.entries.push_back(*std::move(entry));
  }
  if (line_number == 0) return BadLine(source, 1, "empty");
  return dump;
}

std::string FlightDumpBaseDir(const std::string& configured) {
  if (!configured.empty()) return configured;
  const char* tmp = std::getenv("TMPDIR");
  return absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/ddp-flight-recorder");
}

std::string FlightDumpPath(const std::string& base, const std::string& group_id, int rank) {
  return absl::StrCat(base, "/", group_id, "/rank", rank, ".jsonl");
}

absl::Status WriteFlightDump(const std::string& path, const FlightDump& dump) {
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    if (absl::Status made = MakeDirectories(path.substr(0, slash)); !made.ok()) return made;
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("flight recorder dump ", path, " exists and is not a regular file; not replaced"));
  }
  return WriteFileAtomically(path, EncodeFlightDump(dump));
}

absl::StatusOr<std::vector<FlightDump>> ReadFlightDumps(const std::string& dir) {
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) return FileError("open directory", dir, errno);
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(listing)) {
    if (absl::EndsWith(entry->d_name, ".jsonl")) names.push_back(entry->d_name);
  }
  ::closedir(listing);
  std::vector<FlightDump> dumps;
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(dir, "/", name);
    absl::StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) return text.status();
    absl::StatusOr<FlightDump> dump = DecodeFlightDump(*text, path);
    if (!dump.ok()) return dump.status();
    dumps.push_back(*std::move(dump));
  }
  std::sort(dumps.begin(), dumps.end(),
            [](const FlightDump& a, const FlightDump& b) { return a.header.rank < b.header.rank; });
  return dumps;
}

}  // namespace ddp
