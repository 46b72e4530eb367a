#include "comm/flight_recorder_report.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "comm/flight_recorder_diagnosis.h"
#include "io/file.h"

namespace ddp {
namespace {

std::string When(absl::Time t) {
  if (t == absl::InfinitePast()) return "unknown time";
  return absl::FormatTime("%Y-%m-%d %H:%M:%E3S %Z", t, absl::LocalTimeZone());
}

std::string Seconds(absl::Duration d) { return absl::StrFormat("%.3fs", absl::ToDoubleSeconds(d)); }

// One recorded call, with its times relative to the dump: "#251 AllReduce(sum) of 4 int64: completed in
// 0.000s, issued 5.012s before the dump".
std::string DescribeEntry(const FlightEntry& e, absl::Time dumped_at) {
  std::string text = e.sequence == kUnnumbered ? "(p2p)" : absl::StrCat("#", e.sequence);
  absl::StrAppend(&text, " ", e.spec.Signature(), ": ", FlightStateName(e.state));
  if (e.started != absl::InfinitePast() && e.ended != absl::InfinitePast()) {
    absl::StrAppend(&text, " in ", Seconds(e.ended - e.started));
  } else if (e.started != absl::InfinitePast()) {
    absl::StrAppend(&text, " ", Seconds(dumped_at - e.started), " before the dump");
  }
  absl::StrAppend(&text, ", issued ", Seconds(dumped_at - e.issued), " before the dump");
  if (!e.error.empty()) absl::StrAppend(&text, " (", e.error, ")");
  return text;
}

// The first sequence number at which two dumps hold different calls: "calls differ at #3: rank 0
// AllReduce(sum) of 4 float32, rank 1 Broadcast(root 0) of 4 float32"; "" when none does.
std::string FirstMismatch(const std::map<int, const FlightDump*>& by_rank) {
  std::map<uint64_t, std::map<std::string, std::vector<int>>> calls;  // seq -> signature -> ranks
  for (const auto& [rank, dump] : by_rank) {
    for (const FlightEntry& e : dump->entries) {
      if (e.sequence != kUnnumbered) calls[e.sequence][e.spec.Signature()].push_back(rank);
    }
  }
  for (const auto& [seq, signatures] : calls) {
    if (signatures.size() < 2) continue;
    std::vector<std::string> parts;
    for (const auto& [signature, ranks] : signatures) parts.push_back(absl::StrCat(NameRanks(ranks), " ", signature));
    return absl::StrCat("calls differ at #", seq, ": ", absl::StrJoin(parts, ", "));
  }
  return "";
}

std::string ReportGroup(const std::string& group_id, const std::map<int, const FlightDump*>& by_rank,
                        const FlightReportOptions& options) {
  const FlightDumpHeader& any = by_rank.begin()->second->header;
  std::vector<int> dumped, missing;
  GroupProgress progress;
  progress.size = any.size;
  progress.silence = "no dump";
  for (int r = 0; r < any.size; ++r) (by_rank.count(r) != 0 ? dumped : missing).push_back(r);
  std::string text = absl::StrCat("group ", group_id, ": ", any.backend, ", ", any.size, " ranks, timeout ",
                                  absl::FormatDuration(any.timeout), "; dumps of ", NameRanks(dumped));
  if (!missing.empty()) absl::StrAppend(&text, "; no dump from ", NameRanks(missing));
  text += "\n";
  for (const auto& [rank, dump] : by_rank) {
    const FlightDumpHeader& h = dump->header;
    const RankProgress p = ProgressOf(dump->entries, h.dumped_at);
    progress.heard[rank] = p;
    absl::StrAppendFormat(&text, "%s\n  host %s, pid %d, dumped %s; %d of %d calls kept\n",
                          DescribeRankProgress(rank, p), h.host, h.pid, When(h.dumped_at), dump->entries.size(),
                          h.recorded);
    absl::StrAppend(&text, "  reason: ", h.reason, "\n");
    const size_t first = dump->entries.size() - std::min<size_t>(dump->entries.size(), std::max(0, options.last_calls));
    for (size_t i = first; i < dump->entries.size(); ++i) {
      absl::StrAppend(&text, "    ", DescribeEntry(dump->entries[i], h.dumped_at), "\n");
    }
  }
  if (const std::string mismatch = FirstMismatch(by_rank); !mismatch.empty()) {
    absl::StrAppend(&text, "mismatch: ", mismatch, "\n");
  }
  absl::StrAppend(&text, "diagnosis: ", DiagnoseProgress(progress), "\n");
  return text;
}

absl::Time NewestDump(const std::vector<FlightDump>& dumps) {
  absl::Time newest = absl::InfinitePast();
  for (const FlightDump& d : dumps) newest = std::max(newest, d.header.dumped_at);
  return newest;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::string ReportFlightDumps(const std::vector<FlightDump>& dumps, const FlightReportOptions& options) {
  // group id -> rank -> the newest dump of that rank.
  std::map<std::string, std::map<int, const FlightDump*>> groups;
  for (const FlightDump& dump : dumps) {
    const FlightDump*& slot = groups[dump.header.group_id][dump.header.rank];
    if (slot == nullptr || slot->header.dumped_at < dump.header.dumped_at) slot = &dump;
  }
  std::vector<std::string> reports;
  for (const auto& [group_id, by_rank] : groups) reports.push_back(ReportGroup(group_id, by_rank, options));
  return absl::StrJoin(reports, "\n");
}

absl::StatusOr<std::string> ReportFlightDumpDir(const std::string& dir, const FlightReportOptions& options) {
  absl::StatusOr<std::vector<FlightDump>> dumps = ReadFlightDumps(dir);
  if (!dumps.ok()) return dumps.status();
  if (!dumps->empty()) return ReportFlightDumps(*dumps, options);
  // A folder of group folders: the newest group, and a list of the others.
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) return FileError("open directory", dir, errno);
  std::set<std::string> names;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name != "." && name != ".." && IsDirectory(absl::StrCat(dir, "/", name))) names.insert(name);
  }
  ::closedir(listing);
  std::string newest_name;
  std::vector<FlightDump> newest;
  std::vector<std::string> others;
  for (const std::string& name : names) {
    absl::StatusOr<std::vector<FlightDump>> group = ReadFlightDumps(absl::StrCat(dir, "/", name));
    if (!group.ok()) return group.status();
    if (group->empty()) continue;
    if (newest.empty() || NewestDump(*group) > NewestDump(newest)) {
      if (!newest_name.empty()) others.push_back(newest_name);
      newest_name = name;
      newest = *std::move(group);
    } else {
      others.push_back(name);
    }
  }
  if (newest.empty()) return absl::NotFoundError(absl::StrCat("no flight recorder dumps in ", dir, " or its folders"));
  std::string text = absl::StrCat("dumps in ", dir, "/", newest_name, others.empty() ? "" : " (the newest group)", "\n");
  absl::StrAppend(&text, ReportFlightDumps(newest, options));
  if (!others.empty()) {
    std::sort(others.begin(), others.end());
    absl::StrAppend(&text, "other groups (name one to report it): ", absl::StrJoin(others, ", "), "\n");
  }
  return text;
}

}  // namespace ddp
