// The analyzer over dumps: the rank without a dump is behind, calls that differ across ranks are named,
// and a folder of groups reports the newest.
#include "comm/flight_recorder_report.h"

#include <sys/stat.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kDumpedAt = absl::FromUnixSeconds(1'800'000'000);

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

FlightEntry Call(uint64_t sequence, CollectiveKind kind, FlightState state) {
  FlightEntry e;
  e.record = sequence;
  e.sequence = sequence;
  e.spec.kind = kind;
  e.spec.numel = 4;
  e.state = state;
  e.issued = kDumpedAt - absl::Seconds(5);
  if (state != FlightState::kIssued) e.started = e.issued;
  if (state == FlightState::kCompleted) e.ended = e.started + absl::Milliseconds(1);
  return e;
}

// Rank `rank` of a 3-rank group: completed calls 0..completed-1, then `last` started.
FlightDump Dump(const std::string& group, int rank, int completed, CollectiveKind last = CollectiveKind::kAllReduce) {
  FlightDump d;
  d.header.group_id = group;
  d.header.backend = "gloo";
  d.header.rank = rank;
  d.header.size = 3;
  d.header.host = "node1";
  d.header.pid = 100 + rank;
  d.header.dumped_at = kDumpedAt;
  d.header.timeout = absl::Seconds(5);
  d.header.capacity = 2000;
  d.header.recorded = completed + 1;
  d.header.reason = absl::StrCat("AllReduce(sum) #", completed, " of 4 float32 on rank ", rank, "/3 (gloo): not completed after 5s");
  for (int i = 0; i < completed; ++i) d.entries.push_back(Call(i, CollectiveKind::kAllReduce, FlightState::kCompleted));
  d.entries.push_back(Call(completed, last, FlightState::kStarted));
  return d;
}

TEST(FlightRecorderReportTest, TheRankWithoutADumpIsBehind) {
  FlightReportOptions options;
  options.last_calls = 2;
  const std::string report = ReportFlightDumps({Dump("g1", 1, 12), Dump("g1", 0, 12)}, options);
  EXPECT_THAT(report, HasSubstr("group g1: gloo, 3 ranks, timeout 5s; dumps of ranks 0, 1; no dump from rank 2\n"));
  EXPECT_THAT(report, HasSubstr("rank 0 is in AllReduce(sum) #12 of 4 float32 (running for 5.0s), after completing "
                                "every call through #11\n  host node1, pid 100, dumped "));
  EXPECT_THAT(report, HasSubstr("  reason: AllReduce(sum) #12 of 4 float32 on rank 1/3 (gloo): not completed after 5s\n"));
  // The last two calls of each rank.
  EXPECT_THAT(report, HasSubstr("    #11 AllReduce(sum) of 4 float32: completed in 0.001s, issued 5.000s before the dump\n"
                                "    #12 AllReduce(sum) of 4 float32: started 5.000s before the dump, issued 5.000s "
                                "before the dump\n"));
  EXPECT_THAT(report, Not(HasSubstr("#10 ")));
  EXPECT_THAT(report, HasSubstr("diagnosis: rank 2 is behind: no dump from rank 2 (stopped, hung, or busy outside "
                                "collectives); it has not completed AllReduce(sum) #12 of 4 float32, which ranks 0, 1 "
                                "are in (running for 5.0s, after completing every call through #11)\n"));
  EXPECT_THAT(report, Not(HasSubstr("mismatch")));
}

TEST(FlightRecorderReportTest, NamesTheRankBehindAmongDumpsAndCallsThatDiffer) {
  const std::string report =
      ReportFlightDumps({Dump("g", 0, 12), Dump("g", 1, 11), Dump("g", 2, 12, CollectiveKind::kBarrier)}, {});
  EXPECT_THAT(report, HasSubstr("mismatch: calls differ at #12: rank 0 AllReduce(sum) of 4 float32, rank 2 Barrier\n"));
  EXPECT_THAT(report, HasSubstr("diagnosis: rank 1 is behind: it is in AllReduce(sum) #11 of 4 float32 (running for "
                                "5.0s), while ranks 0, 2 are in AllReduce(sum) #12"));
}

TEST(FlightRecorderReportTest, AFolderOfGroupsReportsTheNewest) {
  const std::string base = TestDir("report_base");
  FlightDump older = Dump("older", 0, 3);
  older.header.dumped_at = kDumpedAt - absl::Hours(1);
  ASSERT_TRUE(WriteFlightDump(FlightDumpPath(base, "older", 0), older).ok());
  for (int rank : {0, 1, 2}) ASSERT_TRUE(WriteFlightDump(FlightDumpPath(base, "newer", rank), Dump("newer", rank, 7)).ok());
  absl::StatusOr<std::string> report = ReportFlightDumpDir(base, {});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(*report, HasSubstr(absl::StrCat("dumps in ", base, "/newer (the newest group)\n")));
  EXPECT_THAT(*report, HasSubstr("dumps of ranks 0, 1, 2\n"));
  EXPECT_THAT(*report, HasSubstr("diagnosis: no rank is behind: ranks 0, 1, 2 are in AllReduce(sum) #7"));
  EXPECT_THAT(*report, HasSubstr("other groups (name one to report it): older\n"));
  // A group's own folder reports that group alone.
  absl::StatusOr<std::string> one = ReportFlightDumpDir(base + "/older", {});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(*one, HasSubstr("group older: gloo, 3 ranks"));
  EXPECT_THAT(*one, Not(HasSubstr("newer")));
}

TEST(FlightRecorderReportTest, AFolderWithoutDumpsIsAnError) {
  const std::string empty = TestDir("report_empty");
  ASSERT_EQ(::mkdir(empty.c_str(), 0755), 0);
  absl::StatusOr<std::string> report = ReportFlightDumpDir(empty, {});
  EXPECT_EQ(report.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(report.status().message(), HasSubstr("no flight recorder dumps in " + empty));
  EXPECT_EQ(ReportFlightDumpDir(empty + "/missing", {}).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ddp
