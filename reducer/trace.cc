#include "reducer/trace.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/process_group.h"

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
  Instant(absl::StrCat("grad ready: ", event.name), kComputeTrack, event.at);
}

void TraceRecorder::OnBucketLaunched(const BucketLaunchedEvent& event) {
  Instant(absl::StrCat("launch bucket ", event.bucket), kComputeTrack, event.at,
          absl::StrCat("\"bytes\": ", event.bytes));
}

void TraceRecorder::OnBucketDone(const BucketDoneEvent& event) {
  Span(absl::StrCat("bucket ", event.bucket, " ", event.hook), kCommTrack, event.start, event.end,
       absl::StrCat("\"bytes\": ", event.bytes, ", \"params\": ", event.params));
}

void TraceRecorder::OnIterationEnd(const IterationEndEvent& event) {
  Span("forward", kComputeTrack, event.forward_start, event.backward_start);
  Span("backward", kComputeTrack, event.backward_start, event.backward_end);
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
  std::vector<std::string> all;
  absl::Status gathered = group.AllGatherObject(recorder.EventsJson(), &all);
  if (!gathered.ok()) return absl::Status(gathered.code(), absl::StrCat("gathering trace events: ", gathered.message()));
  if (group.rank() != 0) return absl::OkStatus();
  std::ofstream out(path);
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  for (size_t r = 0; r < all.size(); ++r) {
    const std::string meta = absl::StrFormat(
        "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}},\n"
        "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": \"compute\"}},\n"
        "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 1, \"args\": {\"name\": \"communication\"}}",
        r, r, r, r);
    out << (first ? "" : ",\n") << meta;
    first = false;
    if (!all[r].empty()) out << ",\n" << all[r];
  }
  out << "\n]}\n";
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write trace file ", path));
  return absl::OkStatus();
}

}  // namespace ddp
