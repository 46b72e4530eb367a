// ddp_sim validate's summary: the measured cost of the predicted best cap and of the caps a chooser takes
// from the prediction (the default unless another setting is predicted to save kMinPredictedGain), and the
// same with the rows of one bucket layout pooled.
#include "sim/cli.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace ddp {
namespace sim {
namespace {

// Four float32 parameters of 1 MiB each, ready in reverse order at 4, 3, 2, 1 ms; forward 3 ms, backward
// 5 ms, other 1 ms.
constexpr char kProfile[] = R"({"forward_ms": 3, "backward_ms": 5, "other_ms": 1, "params": [
  {"name": "a", "numel": 262144, "ready_ms": 4}, {"name": "b", "numel": 262144, "ready_ms": 3},
  {"name": "c", "numel": 262144, "ready_ms": 2}, {"name": "d", "numel": 262144, "ready_ms": 1}]})";

std::string WriteTemp(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// A sweep CSV (bench/bucket_sweep.sh's columns) with the measured step of caps "1", "inf" and the default.
std::string Sweep(const std::string& name, double one_ms, double inf_ms, double default_ms) {
  return WriteTemp(name,
                   "index,config,buckets,step_ms,comm_ms,exposed_comm_ms,samples_per_s\n"
                   "0,\"1\",4," +
                       std::to_string(one_ms) +
                       ",1,1,1\n"
                       "1,\"inf\",1," +
                       std::to_string(inf_ms) +
                       ",1,1,1\n"
                       "2,\"default 1/25\",2," +
                       std::to_string(default_ms) + ",1,1,1\n");
}

CliFlags ValidateFlags(const std::string& sweep, double alpha_us, double gbps) {
  CliFlags flags;
  flags.profile = WriteTemp("profile.json", kProfile);
  flags.alpha_us = alpha_us;
  flags.gbps = gbps;
  flags.sweep_csv = sweep;
  return flags;
}

TEST(ValidateTest, ChoosesThePredictedBestWhenItSavesEnough) {
  // At 1 GB/s and 100 us per message the simulator predicts 9.99 ms for caps of 1 MiB (one bucket per
  // parameter, overlapped) and 11.35 ms for the default 1/25: a 12% gain, so the chooser takes "1".
  absl::StatusOr<std::string> report =
      RunSubcommand("validate", ValidateFlags(Sweep("fast_gain.csv", 10.0, 12.0, 11.0), 100, 1));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_NE(report->find("best cap: measured \"1\" 10.00 ms; predicted best \"1\" measured 10.00 ms (+0.0%)"),
            std::string::npos)
      << *report;
  EXPECT_NE(report->find("\"1\" measured 10.00 ms (+0.0%)\n"), std::string::npos) << *report;
  EXPECT_NE(report->find("chosen cap (default unless another is predicted to save 3% of a step): \"1\""),
            std::string::npos)
      << *report;
}

TEST(ValidateTest, KeepsTheDefaultWhenNothingIsPredictedToSaveEnough) {
  // At 20 GB/s every setting hides its communication: all predict 9 ms. The predicted best is the first
  // of the tie ("1"); the chooser keeps the default, measured 9.2 ms against the best 9.0 ms.
  absl::StatusOr<std::string> report =
      RunSubcommand("validate", ValidateFlags(Sweep("tie.csv", 9.0, 9.5, 9.2), 50, 20));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_NE(report->find("predicted best \"1\" measured 9.00 ms (+0.0%)"), std::string::npos) << *report;
  EXPECT_NE(report->find("of a step): \"default 1/25\" measured 9.20 ms (+2.2%)"), std::string::npos)
      << *report;
}

// Caps 5, 25 and 100 MiB all give these 4 MiB one bucket: one experiment measured three times. The pooled
// line averages them (10.07 ms) before comparing; the plain line takes the first of the tied predictions
// ("5", 10.4 ms) against the luckiest of the three ("25", 9.6 ms).
TEST(ValidateTest, PoolsTheRowsThatRunTheSameLayout) {
  const std::string sweep = WriteTemp("same_layout.csv",
                                      "index,config,buckets,step_ms,comm_ms,exposed_comm_ms,samples_per_s\n"
                                      "0,\"1\",4,10.0,1,1,1\n"
                                      "1,\"5\",1,10.4,1,1,1\n"
                                      "2,\"25\",1,9.6,1,1,1\n"
                                      "3,\"100\",1,10.2,1,1,1\n");
  CliFlags flags = ValidateFlags(sweep, 100, 1);
  flags.no_overlap = true;  // every bucket after backward: the fewest messages win
  absl::StatusOr<std::string> report = RunSubcommand("validate", flags);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_NE(report->find("best cap: measured \"25\" 9.60 ms; predicted best \"5\" measured 10.40 ms (+8.3%)"),
            std::string::npos)
      << *report;
  EXPECT_NE(report->find("best layout (cap rows with the same buckets pooled): measured \"1\" 10.00 ms; "
                         "predicted best \"5|25|100\" measured 10.07 ms (+0.7%)"),
            std::string::npos)
      << *report;
}

// The freed-core schedule from the command line: the shared-core link is read from its fit file (an error
// names a file without the world size's fit), and is refused without --comm_after_first_backward (it means
// nothing in any other schedule).
TEST(ValidateTest, TakesASharedCoreLinkOnlyWithTheFreedCoreSchedule) {
  CliFlags flags = ValidateFlags(Sweep("shared.csv", 10.0, 12.0, 11.0), 100, 1);
  flags.shared_core_link = WriteTemp(
      "one_core.json", R"({"fits": [{"world_size": 2, "alpha_s": 0.0004, "beta_s_per_byte": 2e-9}]})");
  absl::StatusOr<std::string> refused = RunSubcommand("validate", flags);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--comm_after_first_backward"), std::string::npos)
      << refused.status();
  flags.comm_after_first_backward = true;
  absl::StatusOr<std::string> report = RunSubcommand("validate", flags);
  EXPECT_TRUE(report.ok()) << report.status();
  flags.shared_core_link = WriteTemp("no_world_2.json", R"({"fits": [{"world_size": 4, "alpha_s": 1}]})");
  absl::StatusOr<std::string> missing = RunSubcommand("validate", flags);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no_world_2.json"), std::string::npos) << missing.status();
}

}  // namespace
}  // namespace sim
}  // namespace ddp
