#include "comm/flight_recorder_postmortem.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/check.h"
#include "base/wall_clock.h"
#include "comm/flight_recorder_diagnosis.h"
#include "comm/flight_recorder_dump.h"
#include "nlohmann/json.hpp"

namespace ddp {

// Note [Hang postmortem]
// A hang has no error of its own. The rank that holds a group up is usually not failing anything: it
// is SIGSTOPped, busy in compute or a data loader, or waiting in another group, so only the ranks that
// wait for it see a timeout, and each of them can only say "my call did not complete". So the first
// time a call of the group fails, or a wait that covered the group's whole timeout ends with the call
// still running (QueuedWork::Wait), the rank
//   1. writes its flight-recorder dump first (Note [Flight recorder dumps]), so that a store that is
//      gone cannot keep it from being written;
//   2. sends a report, {its error, the call, its progress: the last call it completed and the call it is
//      in}, through the failure reports (Note [Failure reports]), and waits at most their window for the
//      other ranks' reports and the launcher's exit notices;
//   3. names, from what arrived (DiagnoseProgress), the rank that is behind and the call it has not
//      completed: a rank that sent nothing within the window is named by its silence (stopped, hung, or
//      busy outside collectives; a launcher's exit notice says how a dead one ended), and among ranks that
//      did report, those at the lowest position in the issue order are behind.
// Sequence numbers match across ranks (Note [Flight recorder]), so "#252" means the same call in every
// rank's error and dump. The result is kept: Gloo's failure path (ProcessGroupGloo::Fail) and a
// timed-out wait share one exchange, whichever comes first; every later failure of the group repeats
// the first explanation, since after the first failure the ranks' positions no longer mean much.
// A rank that is not itself waiting on a failed call cannot report, and is named as silent; when the
// store is unreachable the error says so (naming the rank that serves it, when one does) and describes
// this rank's own progress only. The cost is paid only after a failure: the recorder's ring on the hot
// path (Note [Flight recorder]) is all that runs before.

namespace {

using nlohmann::json;

constexpr char kGroupIdKey[] = "flight_recorder/group_id";

std::string HostName() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

FlightRecorderOptions ResolveRecorderOptions(const std::optional<FlightRecorderOptions>& given) {
  if (given.has_value()) return *given;
  absl::StatusOr<FlightRecorderOptions> from_env = FlightRecorderOptionsFromEnv(ProcessEnv());
  if (from_env.ok()) return *from_env;
  static bool warned = false;  // once per process: every group would repeat it
  if (!warned) {
    warned = true;
    std::fprintf(stderr, "ddp: flight recorder: %s; using the defaults\n", std::string(from_env.status().message()).c_str());
  }
  return FlightRecorderOptions();
}

// A rank's report, as the store carries it.
std::string EncodeReport(const std::string& error, const std::optional<CollectiveCall>& call,
                         const std::optional<RankProgress>& progress) {
  json j = {{"error", error}, {"call", nullptr}, {"progress", nullptr}};
  if (call) j["call"] = {{"seq", call->sequence}, {"signature", call->signature}};
  if (progress) j["progress"] = json::parse(EncodeProgress(*progress));
  return j.dump();
}

// What another rank's report says: its call and progress (each absent when it sent none or the value
// is not a report).
void DecodeReport(const std::string& value, std::optional<CollectiveCall>* call,
                  std::optional<RankProgress>* progress) {
  const json j = json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return;
  const json& c = j.value("call", json(nullptr));
  if (c.is_object() && c.contains("seq") && c["seq"].is_number_unsigned() && c.contains("signature") &&
      c["signature"].is_string()) {
    *call = CollectiveCall{c["seq"].get<uint32_t>(), c["signature"].get<std::string>()};
  }
  const json& p = j.value("progress", json(nullptr));
  if (p.is_object()) {
    absl::StatusOr<RankProgress> decoded = DecodeProgress(p.dump());
    if (decoded.ok()) *progress = *std::move(decoded);
  }
}

}  // namespace

GroupPostmortem::GroupPostmortem(const char* backend, int rank, int size, absl::Duration timeout,
                                 PostmortemOptions options)
    : backend_(backend),
      rank_(rank),
      size_(size),
      timeout_(timeout),
      options_(std::move(options)),
      recorder_options_(ResolveRecorderOptions(options_.recorder)),
      recorder_(std::make_unique<FlightRecorder>(recorder_options_.entries)) {
  DDP_CHECK(rank >= 0 && rank < size) << "GroupPostmortem: rank " << rank << " outside a group of " << size;
  absl::MutexLock lock(&mu_);
  if (options_.store != nullptr) {
    reports_ = std::make_unique<FailureReports>(options_.store, options_.report_key_prefix, rank, size,
                                                options_.window, options_.store_host_rank);
  }
}

std::string GroupPostmortem::DumpOnce(const std::string& reason, const std::vector<FlightEntry>& snapshot) {
  if (dumped_ || !recorder_->enabled()) return dump_note_;
  dumped_ = true;
  FlightDump dump;
  dump.header.group_id = options_.group_id.empty() ? absl::StrCat(backend_, "-group") : options_.group_id;
  dump.header.backend = backend_;
  dump.header.rank = rank_;
  dump.header.size = size_;
  dump.header.host = HostName();
  dump.header.pid = ::getpid();
  dump.header.dumped_at = WallNow();
  dump.header.timeout = timeout_;
  dump.header.capacity = recorder_->capacity();
  dump.header.recorded = recorder_->recorded();
  dump.header.reason = reason;
  dump.entries = snapshot;
  const std::string base = FlightDumpBaseDir(recorder_options_.dump_dir);
  const std::string path = FlightDumpPath(base, dump.header.group_id, rank_);
  const absl::Status written = WriteFlightDump(path, dump);
  dump_note_ = written.ok() ? absl::StrCat("dump ", path, "; every rank's: flight_recorder_report ",
                                           base, "/", dump.header.group_id)
                            : absl::StrCat("no dump: ", written.message());
  return dump_note_;
}

void GroupPostmortem::Dump(const std::string& reason, const AsyncWork* failing) {
  if (!recorder_->enabled()) return;
  absl::MutexLock lock(&mu_);
  if (!dumped_) DumpOnce(reason, recorder_->Snapshot(failing, reason));
}

void GroupPostmortem::Detach() {
  absl::MutexLock lock(&mu_);
  reports_.reset();
}

PostmortemResult GroupPostmortem::Explain(const std::string& error, const std::optional<CollectiveCall>& call,
                                          const AsyncWork* failing) {
  absl::MutexLock lock(&mu_);
  if (!result_.has_value()) result_ = ExplainFirst(error, call, failing);
  return *result_;
}

PostmortemResult GroupPostmortem::ExplainFirst(const std::string& error, const std::optional<CollectiveCall>& call,
                                               const AsyncWork* failing) {
  PostmortemResult result;
  std::optional<RankProgress> mine;
  std::string note;
  if (recorder_->enabled()) {
    const absl::Time now = WallNow();
    const std::vector<FlightEntry> snapshot = recorder_->Snapshot(failing, error);
    mine = ProgressOf(snapshot, now);
    note = DumpOnce(error, snapshot);
  }
  if (call) result.calls[rank_] = *call;
  GroupProgress group;
  group.size = size_;
  group.silence = absl::StrCat("no progress report within ", absl::FormatDuration(options_.window));
  bool exchanged = false;
  if (reports_ != nullptr) {
    FailureEvidence evidence;
    absl::StrAppend(&result.text, " ", reports_->Report(EncodeReport(error, call, mine), &evidence));
    exchanged = evidence.reports.count(rank_) != 0;  // else the store failed: the summary says so
    for (const auto& [r, value] : evidence.reports) {
      std::optional<CollectiveCall> their_call;
      std::optional<RankProgress> their_progress;
      DecodeReport(value, &their_call, &their_progress);
      if (their_call) result.calls[r] = *their_call;
      group.heard[r] = std::move(their_progress);
    }
    for (const auto& [r, notice] : evidence.exit_notices) group.exited[r] = notice;
  }
  group.heard[rank_] = mine;
  std::string diagnosis;
  if (exchanged || size_ == 1) {
    diagnosis = DiagnoseProgress(group);
  } else if (mine) {
    diagnosis = absl::StrCat(DescribeRankProgress(rank_, *mine), "; the other ranks' progress is unknown (",
                             reports_ == nullptr ? "no store to exchange it" : "the store is unavailable", ")");
  } else {
    diagnosis = "this rank recorded no calls (DDP_FLIGHT_RECORDER_ENTRIES=0)";
  }
  absl::StrAppend(&result.text, " [flight recorder: ", diagnosis, note.empty() ? "" : "; ", note, "]");
  return result;
}

absl::StatusOr<std::string> AgreeFlightGroupId(Store& store, int rank, absl::Duration timeout) {
  if (rank == 0) {
    const std::string id =
        absl::StrCat(absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::LocalTimeZone()), "-pid", ::getpid());
    if (absl::Status set = store.Set(kGroupIdKey, id); !set.ok()) {
      return absl::Status(set.code(), absl::StrCat("flight recorder: cannot publish the group id: ", set.message()));
    }
    return id;
  }
  absl::StatusOr<std::string> id = store.Get(kGroupIdKey, timeout);
  if (!id.ok()) {
    return absl::Status(id.status().code(),
                        absl::StrCat("flight recorder: no group id from rank 0: ", id.status().message()));
  }
  return id;
}

}  // namespace ddp
