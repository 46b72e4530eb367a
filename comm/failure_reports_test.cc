// Failure reports: the summary names the ranks that never reported; ranks as threads over one store.
#include "comm/failure_reports.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "store/memory_store.h"
#include "store/prefix_store.h"
#include "store/store_keys.h"

namespace ddp {
namespace {

TEST(SummarizeFailureReportsTest, NamesTheSilentRanks) {
  const absl::Duration window = absl::Seconds(3);
  FailureEvidence three_of_four{{{0, "a"}, {1, "b"}, {3, "c"}}, {}};
  EXPECT_EQ(SummarizeFailureReports(4, three_of_four, window),
            "[failure reports: lost rank 2 (no report within 3s: killed, crashed, hung or left early); "
            "ranks 0, 1, 3 failed too]");
  EXPECT_EQ(SummarizeFailureReports(4, FailureEvidence{{{1, "b"}}, {}}, window),
            "[failure reports: lost ranks 0, 2, 3 (no report within 3s: killed, crashed, hung or left early); "
            "rank 1 failed too]");
  EXPECT_EQ(SummarizeFailureReports(2, FailureEvidence{{{0, "a"}, {1, "b"}}, {}}, window),
            "[failure reports: every rank reported a failure, none was lost]");
}

TEST(SummarizeFailureReportsTest, LauncherNoticesNameHowTheRankDied) {
  FailureEvidence evidence{{{0, "a"}, {3, "c"}}, {{2, "exit code 137 (signal 9)"}, {3, "exit code 1"}}};
  EXPECT_EQ(SummarizeFailureReports(4, evidence, absl::Seconds(3)),
            "[failure reports: lost rank 2 (launcher: exit code 137 (signal 9)), rank 1 (no report within 3s: "
            "killed, crashed, hung or left early); ranks 0, 3 failed too]");
}

// Under ddprun the launcher's notice accounts for the dead rank at once: nobody waits for the window.
TEST(FailureReportsTest, LauncherNoticeEndsTheWaitEarly) {
  MemoryStore store;
  PrefixStore launcher_view("pg", &store);  // the launcher writes through the same namespace
  ASSERT_TRUE(launcher_view.Set(LauncherExitNoticeKey(1), "exit code 137 (signal 9)").ok());
  std::vector<std::string> summaries(3);
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int rank : {0, 2}) {
    threads.emplace_back([&, rank] {
      PrefixStore group_store("pg", &store);
      FailureReports reports(&group_store, "failure/", rank, 3, absl::Seconds(20));
      summaries[rank] = reports.Report("AllReduce failed");
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (int rank : {0, 2}) {
    EXPECT_EQ(summaries[rank], "[failure reports: lost rank 1 (launcher: exit code 137 (signal 9)); ranks 0, 2 "
                               "failed too]");
  }
}

// Three of four ranks fail (at slightly different times) and report; rank 2 never does. Every reporter
// names rank 2, and none waits much longer than the window.
TEST(FailureReportsTest, SurvivorsNameTheRankThatNeverReported) {
  MemoryStore store;
  const absl::Duration window = absl::Milliseconds(800);
  std::vector<std::string> summaries(4);
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int rank : {0, 1, 3}) {
    threads.emplace_back([&, rank] {
      absl::SleepFor(absl::Milliseconds(50 * rank));
      FailureReports reports(&store, "pg/failure/", rank, 4, window);
      summaries[rank] = reports.Report(absl::StrCat("AllReduce failed on rank ", rank));
      EXPECT_EQ(reports.Report("a later failure"), summaries[rank]) << "the first summary is kept";
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  for (int rank : {0, 1, 3}) {
    EXPECT_NE(summaries[rank].find("lost rank 2 (no report within 800ms"), std::string::npos) << summaries[rank];
    EXPECT_NE(summaries[rank].find("ranks 0, 1, 3 failed too"), std::string::npos) << summaries[rank];
  }
  EXPECT_EQ(*store.Get("pg/failure/1", absl::ZeroDuration()), "AllReduce failed on rank 1");
}

// A store that is gone (the lost rank hosted it) gives a summary that says so, at once.
class DeadStore : public MemoryStore {
 public:
  absl::Status Set(absl::string_view, absl::string_view) override {
    return absl::UnavailableError("store connection closed");
  }
};

TEST(FailureReportsTest, UnavailableStoreIsSaidPlainly) {
  DeadStore store;
  FailureReports reports(&store, "pg/failure/", 0, 2, absl::Seconds(30));
  const absl::Time start = absl::Now();
  EXPECT_EQ(reports.Report("x"), "[failure reports unavailable: store connection closed]");
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

// When a rank serves the store, an unreachable store names it: it is the rank that is gone or stopped.
TEST(FailureReportsTest, AnUnavailableStoreNamesTheRankThatServesIt) {
  DeadStore store;
  FailureReports reports(&store, "pg/failure/", 1, 2, absl::Seconds(30), /*store_host_rank=*/0);
  FailureEvidence evidence;
  EXPECT_EQ(reports.Report("x", &evidence),
            "[failure reports unavailable: store connection closed; rank 0 serves the store, so it is gone or "
            "not responding (dead, stopped or cut off)]");
  EXPECT_TRUE(evidence.reports.empty());
  // The store host itself says nothing of itself.
  FailureReports host(&store, "pg/failure/", 0, 2, absl::Seconds(30), /*store_host_rank=*/0);
  EXPECT_EQ(host.Report("x"), "[failure reports unavailable: store connection closed]");
}

// The evidence a caller asks for is what the summary was made of: every rank's report.
TEST(FailureReportsTest, EvidenceHoldsTheReports) {
  MemoryStore store;
  ASSERT_TRUE(store.Set("pg/failure/1", "rank 1's report").ok());
  FailureReports reports(&store, "pg/failure/", 0, 2, absl::Seconds(30));
  FailureEvidence evidence;
  EXPECT_EQ(reports.Report("rank 0's report", &evidence), "[failure reports: every rank reported a failure, none was lost]");
  EXPECT_EQ(evidence.reports.at(0), "rank 0's report");
  EXPECT_EQ(evidence.reports.at(1), "rank 1's report");
  FailureEvidence again;
  reports.Report("ignored", &again);  // later calls repeat the first exchange
  EXPECT_EQ(again.reports.at(0), "rank 0's report");
}

}  // namespace
}  // namespace ddp
