// bench/bucket_sweep_interleaved end to end on 2 ranks (Note [Interleaved sweep]): one row per
// configuration in the order given, every round's block timed, blocks that rotate and never overlap,
// iteration ranges that match the trace, and a bad configuration named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "testing/process.h"

namespace ddp {
namespace {

using nlohmann::json;

ProcessResult RunSweep(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {Runfile("launch/ddprun"),
                                   "--nproc_per_node=2",
                                   "--master_port=0",
                                   Runfile("bench/bucket_sweep_interleaved"),
                                   "--model=mlp",
                                   "--backend=shm"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  RunOptions options;
  options.timeout = absl::Seconds(240);
  return RunProcess(argv, options);
}

// Rank 0's JSON rows.
std::vector<json> Rows(const std::string& out) {
  std::vector<json> rows;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (!absl::ConsumePrefix(&line, "[rank 0] {")) continue;
    rows.push_back(json::parse("{" + std::string(line)));
  }
  return rows;
}

// "a-b,c-d" as pairs.
std::vector<std::pair<int64_t, int64_t>> Ranges(const std::string& text) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::pair<std::string, std::string> bounds = absl::StrSplit(item, '-');
    int64_t first = 0, end = 0;
    EXPECT_TRUE(absl::SimpleAtoi(bounds.first, &first) && absl::SimpleAtoi(bounds.second, &end)) << text;
    ranges.emplace_back(first, end);
  }
  return ranges;
}

TEST(BucketSweepInterleavedTest, EveryConfigurationEveryRoundInRotatingBlocks) {
  const std::string trace = TempPath("interleaved_trace.json");
  std::remove(trace.c_str());
  const ProcessResult r =
      RunSweep({"--configs=1,default,auto,no_overlap", "--rounds=2", "--block_steps=3", "--block_warmup=1",
                "--warmup=2", "--auto_caps_steps=2", "--trace_out=" + trace});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const std::vector<json> rows = Rows(r.out);
  ASSERT_EQ(rows.size(), 4u) << r.all();
  EXPECT_EQ(rows[0]["config"], "1");
  EXPECT_EQ(rows[1]["config"], "default 1/25");
  EXPECT_EQ(rows[2]["config"].get<std::string>().rfind("auto ", 0), 0u) << rows[2];
  EXPECT_EQ(rows[3]["config"], "no_overlap");
  EXPECT_EQ(rows[1]["buckets"], rows[3]["buckets"]);  // no_overlap keeps the default layout
  std::vector<std::pair<int64_t, int64_t>> all;
  for (const json& row : rows) {
    ASSERT_EQ(row["step_ms_rounds"].size(), 2u) << row;
    EXPECT_GT(row["step_ms"].get<double>(), 0.0);
    const auto ranges = Ranges(row["iterations"]);
    ASSERT_EQ(ranges.size(), 2u) << row;
    for (const auto& [first, end] : ranges) EXPECT_EQ(end - first, 3) << row;
    all.insert(all.end(), ranges.begin(), ranges.end());
  }
  std::sort(all.begin(), all.end());
  for (size_t i = 1; i < all.size(); ++i) {
    EXPECT_GE(all[i].first, all[i - 1].second + 1) << "blocks overlap or lack their warm-up step";
  }
  // Round 0 runs "1" first; round 1 starts one configuration later, so "1" runs last.
  EXPECT_LT(Ranges(rows[0]["iterations"])[0].first, Ranges(rows[1]["iterations"])[0].first);
  EXPECT_GT(Ranges(rows[0]["iterations"])[1].first, Ranges(rows[3]["iterations"])[1].first);
  // The trace has one forward per step on rank 0's track, through the last block.
  std::string text;
  ASSERT_EQ(RunShell("cat " + trace, &text), 0);
  int64_t forwards = 0;
  const json events = json::parse(text);
  for (const json& e : events["traceEvents"]) {
    if (e.value("name", "") == "forward" && e.value("pid", -1) == 0) ++forwards;
  }
  EXPECT_EQ(forwards, all.back().second);
}

TEST(BucketSweepInterleavedTest, ABadConfigurationIsNamed) {
  const ProcessResult r = RunSweep({"--configs=1,banana", "--rounds=1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.all().find("\"banana\" is not a cap in MiB"), std::string::npos) << r.all();
}

}  // namespace
}  // namespace ddp
