#include "reducer/iteration_stats.h"

#include <gtest/gtest.h>

namespace ddp {
namespace {

absl::Time At(double ms) { return absl::UnixEpoch() + absl::Milliseconds(ms); }

TEST(IterationStatsTest, OverlapSplitsAtBackwardEnd) {
  IterationStats stats;
  // Two overlapping intervals [10, 30] and [20, 50], backward ends at 40: comm 40 ms, 30 before, 10 after.
  ComputeOverlap({{At(20), At(50)}, {At(10), At(30)}}, At(40), &stats);
  EXPECT_NEAR(stats.comm_s, 0.040, 1e-9);
  EXPECT_NEAR(stats.overlapped_comm_s, 0.030, 1e-9);
  EXPECT_NEAR(stats.exposed_comm_s, 0.010, 1e-9);
}

TEST(IterationStatsTest, AllAfterBackwardIsExposed) {
  IterationStats stats;
  ComputeOverlap({{At(45), At(60)}}, At(40), &stats);
  EXPECT_NEAR(stats.overlapped_comm_s, 0.0, 1e-9);
  EXPECT_NEAR(stats.exposed_comm_s, 0.020, 1e-9);  // the host waits from 40 to 60
  ComputeOverlap({}, At(40), &stats);
  EXPECT_EQ(stats.comm_s, 0.0);
}

TEST(IterationStatsTest, RecorderTurnsEventsIntoStats) {
  IterationStatsRecorder recorder;
  for (int64_t iteration = 0; iteration < 2; ++iteration) {
    // Forward 0-10 ms, backward 10-40 ms, buckets [20, 30] and [35, 50]: comm 25 ms, 15 ms of it overlapped.
    recorder.OnBucketDone({0, 4, 1, "allreduce", At(20), At(30), 4});
    recorder.OnBucketDone({1, 4, 1, "allreduce", At(35), At(50), 2});
    recorder.OnIterationEnd({iteration, 2, At(0), At(10), At(40)});
  }
  ASSERT_EQ(recorder.history().size(), 2u);
  const IterationStats& stats = recorder.history()[1];  // the first iteration's buckets are not counted again
  EXPECT_EQ(stats.iteration, 1);
  EXPECT_EQ(stats.buckets, 2);
  EXPECT_NEAR(stats.forward_s, 0.010, 1e-9);
  EXPECT_NEAR(stats.backward_compute_s, 0.030, 1e-9);
  EXPECT_NEAR(stats.comm_s, 0.025, 1e-9);
  EXPECT_NEAR(stats.overlapped_comm_s, 0.015, 1e-9);
  EXPECT_NEAR(stats.exposed_comm_s, 0.010, 1e-9);
  EXPECT_EQ(stats.bytes_sent, 6);  // this iteration's buckets only
}

TEST(IterationStatsTest, TableHasMeanAndP90) {
  std::vector<IterationStats> history(11);
  for (int i = 0; i < 11; ++i) history[i].forward_s = 0.001 * i;  // first one skipped as warm-up
  const std::string table = FormatStatsTable(history);
  EXPECT_NE(table.find("over 10 iterations"), std::string::npos) << table;
  EXPECT_NE(table.find("forward                 5.500      9.000"), std::string::npos) << table;
}

TEST(IterationStatsTest, TableShowsBytesSentPerStep) {
  std::vector<IterationStats> history(11);
  for (int i = 0; i < 11; ++i) history[i].bytes_sent = 1024 * i;  // KiB 1..10 after the warm-up
  const std::string table = FormatStatsTable(history);
  EXPECT_NE(table.find("sent/step (KiB)           5.5        9.0"), std::string::npos) << table;
}

}  // namespace
}  // namespace ddp
