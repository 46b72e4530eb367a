#include "reducer/trace.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "testing/run_ranks.h"

namespace ddp {
namespace {

const absl::Time kT0 = absl::FromUnixMicros(1'000'000);
absl::Time At(int ms) { return kT0 + absl::Milliseconds(ms); }

// Two buckets: one ends during backward (nothing exposed), one runs 5 ms past it, and a third
// overlapping the second: the exposed slice is their union after backward, [40, 48].
void RecordIteration(TraceRecorder& trace) {
  trace.OnBucketDone(BucketDoneEvent{0, 1024, 2, "allreduce", At(20), At(30)});
  trace.OnBucketDone(BucketDoneEvent{1, 2048, 3, "allreduce", At(35), At(45)});
  trace.OnBucketDone(BucketDoneEvent{2, 512, 1, "allreduce", At(44), At(48)});
  trace.OnIterationEnd(IterationEndEvent{0, 3, At(0), At(10), At(40)});
}

TEST(TraceTest, ExposedCommunicationIsTheUnionAfterBackward) {
  TraceRecorder trace(0);
  RecordIteration(trace);
  const nlohmann::json events = nlohmann::json::parse("[" + trace.EventsJson() + "]");
  int exposed = 0;
  for (const auto& e : events) {
    if (e["name"] != "exposed communication") continue;
    ++exposed;
    EXPECT_EQ(e["tid"], TraceRecorder::kExposedTrack);
    EXPECT_EQ(e["ts"].get<int64_t>(), absl::ToUnixMicros(At(40)));
    EXPECT_EQ(e["dur"].get<int64_t>(), 8000);
  }
  EXPECT_EQ(exposed, 1);
}

// The merged file is valid JSON with one named process per rank, four named tracks each, and every
// rank's own events, from both of its recorders.
TEST(TraceTest, MergedTraceHasEveryRank) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/merged_trace.json");
  RunRanks(3, [&](int rank, ProcessGroup& group) {
    TraceRecorder trace(rank);
    RecordIteration(trace);
    trace.Span(absl::StrCat("rank ", rank, "'s own span"), TraceRecorder::kComputeTrack, At(0), At(1));
    TraceRecorder modules(rank);
    modules.Span(absl::StrCat("rank ", rank, "'s module span"), TraceRecorder::kModuleTrack, At(0), At(1));
    ASSERT_TRUE(WriteMergedTrace({&trace, &modules}, group, path).ok());
  });
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::set<int> processes, own, module_spans;
  std::set<std::pair<int, int>> tracks;
  for (const auto& e : trace["traceEvents"]) {
    if (e["name"] == "process_name") processes.insert(e["pid"].get<int>());
    if (e["name"] == "thread_name") tracks.insert({e["pid"].get<int>(), e["tid"].get<int>()});
    const std::string name = e["name"];
    if (name.find("'s own span") != std::string::npos) {
      EXPECT_EQ(name, absl::StrCat("rank ", e["pid"].get<int>(), "'s own span"));
      own.insert(e["pid"].get<int>());
    }
    if (name.find("'s module span") != std::string::npos) {
      EXPECT_EQ(e["tid"], TraceRecorder::kModuleTrack);
      module_spans.insert(e["pid"].get<int>());
    }
  }
  EXPECT_EQ(processes, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(tracks.size(), 12u);
  EXPECT_EQ(own, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(module_spans, (std::set<int>{0, 1, 2}));
}

TEST(TraceTest, UnwritablePathNamesTheFileAndTheError) {
  RunRanks(1, [&](int, ProcessGroup& group) {
    TraceRecorder trace(0);
    const absl::Status status = WriteMergedTrace(trace, group, "/nonexistent_dir/trace.json");
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.message().find("/nonexistent_dir/trace.json"), std::string::npos) << status;
    EXPECT_NE(status.message().find("No such file"), std::string::npos) << status;
  });
}

}  // namespace
}  // namespace ddp
