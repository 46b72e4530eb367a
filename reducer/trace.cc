#include "reducer/trace.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/process_group.h"
#include "io/file.h"
#include "base/check.h"

namespace ddp {
namespace {

int64_t Micros(absl::Time t) { return absl::ToUnixMicros(t); }

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace

void TraceRecorder::Span(const std::string& name, int track, absl::Time start, absl::Time end,
                         const std::string& args_json) {
  events_.push_back(absl::StrFormat(
      "{\"name\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %d, \"dur\": %d, \"args\": {%s}}",
      Escape(name), rank_, track, Micros(start), std::max<int64_t>(Micros(end) - Micros(start), 0), args_json));
}

void TraceRecorder::Instant(const std::string& name, int track, absl::Time at, const std::string& args_json) {
  events_.push_back(absl::StrFormat(
      "{\"name\": \"%s\", \"ph\": \"i\", \"s\": \"t\", \"pid\": %d, \"tid\": %d, \"ts\": %d, \"args\": {%s}}",
      Escape(name), rank_, track, Micros(at), args_json));
}

void TraceRecorder::OnGradientReady(const GradientReadyEvent& event) {
  // The size lets ddp_sim profile a trace of any model input (a data set changes the first and last layers).
  Instant(absl::StrCat("grad ready: ", event.name), kComputeTrack, event.at,
          absl::StrCat("\"numel\": ", event.numel));
}

void TraceRecorder::OnBucketLaunched(const BucketLaunchedEvent& event) {
  Instant(absl::StrCat("launch bucket ", event.bucket), kComputeTrack, event.at,
          absl::StrCat("\"bytes\": ", event.bytes));
}

void TraceRecorder::OnBucketDone(const BucketDoneEvent& event) {
  iteration_comm_.emplace_back(event.start, event.end);
  Span(absl::StrCat("bucket ", event.bucket, " ", event.hook), kCommTrack, event.start, event.end,
       absl::StrCat("\"bytes\": ", event.bytes, ", \"params\": ", event.params));
}

void TraceRecorder::OnIterationEnd(const IterationEndEvent& event) {
  Span("forward", kComputeTrack, event.forward_start, event.backward_start);
  Span("backward", kComputeTrack, event.backward_start, event.backward_end);
  // The parts of the bucket spans after backward ended, merged where they overlap.
  std::vector<std::pair<absl::Time, absl::Time>> after;
  for (const auto& [start, end] : iteration_comm_) {
    if (end > event.backward_end) after.emplace_back(std::max(start, event.backward_end), end);
  }
  iteration_comm_.clear();
  std::sort(after.begin(), after.end());
  for (size_t i = 0; i < after.size();) {
    absl::Time start = after[i].first, end = after[i].second;
    for (++i; i < after.size() && after[i].first <= end; ++i) end = std::max(end, after[i].second);
    Span("exposed communication", kExposedTrack, start, end);
  }
}

std::string TraceRecorder::EventsJson() const {
  std::string out;
  for (size_t i = 0; i < events_.size(); ++i) {
    if (i > 0) out += ",\n";
    out += events_[i];
  }
  return out;
}

absl::Status WriteMergedTrace(const TraceRecorder& recorder, ProcessGroup& group, const std::string& path) {
  return WriteMergedTrace(std::vector<const TraceRecorder*>{&recorder}, group, path);
}

absl::Status WriteMergedTrace(const std::vector<const TraceRecorder*>& recorders, ProcessGroup& group,
                              const std::string& path) {
  std::string events;
  for (const TraceRecorder* recorder : recorders) {
    DDP_CHECK(recorder != nullptr && recorder->rank() == group.rank())
        << "WriteMergedTrace: a recorder is null or records another rank";
    if (recorder->size() == 0) continue;
    if (!events.empty()) events += ",\n";
    events += recorder->EventsJson();
  }
  std::vector<std::string> all;
  absl::Status gathered = group.AllGatherObject(events, &all);
  if (!gathered.ok()) return absl::Status(gathered.code(), absl::StrCat("gathering trace events: ", gathered.message()));
  if (group.rank() != 0) return absl::OkStatus();
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (size_t r = 0; r < all.size(); ++r) {
    absl::StrAppendFormat(
        &out,
        "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}},\n"
        "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"compute\"}},\n"
        "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"communication\"}},\n"
        "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
        "\"args\": {\"name\": \"exposed communication\"}},\n"
        "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"modules\"}}",
        r == 0 ? "" : ",\n", r, r, r, TraceRecorder::kComputeTrack, r, TraceRecorder::kCommTrack, r,
        TraceRecorder::kExposedTrack, r, TraceRecorder::kModuleTrack);
    if (!all[r].empty()) absl::StrAppend(&out, ",\n", all[r]);
  }
  out += "\n]}\n";
  return WriteFileAtomically(path, out);
}

}  // namespace ddp
