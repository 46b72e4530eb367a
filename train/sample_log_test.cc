// The sample log: lines round-trip, malformed lines are named, and EffectiveSteps keeps the attempt
// that shaped the final model for every step.
#include "train/sample_log.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace ddp {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(SampleLogTest, LinesRoundTripThroughTheFile) {
  const std::string path = TempPath("samples.log");
  std::remove(path.c_str());
  SampleLogEntry a{0, 2, 1, 1, 17, {4087, 12, 5}};
  SampleLogEntry b{1, 3, 0, 2, 18, {}};
  EXPECT_EQ(FormatSampleLogEntry(a), "attempt=0 world=2 rank=1 epoch=1 step=17 ids=4087,12,5");
  {
    auto log = SampleLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Append(a).ok());
  }
  auto again = SampleLog::Open(path);  // appends, never truncates (restarts share the file)
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*again)->Append(b).ok());
  auto entries = ReadSampleLog(path);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].ids, a.ids);
  EXPECT_EQ((*entries)[0].rank, 1);
  EXPECT_EQ((*entries)[1].attempt, 1);
  EXPECT_EQ((*entries)[1].world_size, 3);
  EXPECT_EQ((*entries)[1].epoch, 2);
  EXPECT_TRUE((*entries)[1].ids.empty());
}

TEST(SampleLogTest, MalformedLinesAreNamed) {
  EXPECT_NE(ParseSampleLogEntry("attempt=0 world=2 rank=1 epoch=1 ids=1").status().message().find("step="),
            std::string::npos);
  EXPECT_NE(ParseSampleLogEntry("attempt=0 world=2 rank=1 epoch=1 step=3 ids=1,x").status().message().find("bad id \"x\""),
            std::string::npos);
  const std::string path = TempPath("bad.log");
  std::ofstream(path) << "attempt=0 world=1 rank=0 epoch=1 step=1 ids=1\ngarbage\n";
  EXPECT_NE(ReadSampleLog(path).status().message().find("bad.log:2:"), std::string::npos);
  EXPECT_FALSE(SampleLog::Open("/nonexistent_dir/x.log").ok());
}

// Attempt 0 ran steps 1..3 (and was killed), attempt 1 resumed from step 2's checkpoint: step 3 of
// attempt 0 was lost work.
TEST(SampleLogTest, EffectiveStepsKeepTheLatestAttemptOfEachStep) {
  std::vector<SampleLogEntry> entries = {
      {0, 2, 0, 1, 1, {1}}, {0, 2, 1, 1, 1, {2}}, {0, 2, 1, 1, 2, {4}}, {0, 2, 0, 1, 2, {3}},
      {0, 2, 0, 1, 3, {5}}, {1, 2, 1, 1, 3, {9}}, {1, 2, 0, 1, 3, {8}}, {1, 2, 0, 1, 4, {7}},
  };
  std::vector<SampleLogEntry> effective = EffectiveSteps(entries);
  std::vector<int64_t> ids;
  for (const auto& e : effective) ids.push_back(e.ids[0]);
  EXPECT_EQ(ids, (std::vector<int64_t>{1, 2, 3, 4, 8, 9, 7}));
}

}  // namespace
}  // namespace ddp
