// The postmortem of a group's first failure: the dump, the exchange through the store, the rank that is
// behind, the store that is gone, and the group id the ranks agree on.
#include "comm/flight_recorder_postmortem.h"

#include <sys/stat.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/flight_recorder_dump.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/file.h"
#include "store/memory_store.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

// A store whose server is gone: every call fails as a TCP store's would.
class GoneStore : public Store {
 public:
  absl::Status Set(absl::string_view, absl::string_view) override { return Gone(); }
  absl::StatusOr<std::string> Get(absl::string_view, absl::Duration) override { return Gone(); }
  absl::StatusOr<int64_t> Add(absl::string_view, int64_t) override { return Gone(); }
  absl::StatusOr<std::string> CompareSet(absl::string_view, absl::string_view, absl::string_view) override {
    return Gone();
  }
  absl::StatusOr<bool> DeleteKey(absl::string_view) override { return Gone(); }
  absl::Status Wait(absl::Span<const std::string>, absl::Duration) override { return Gone(); }
  absl::StatusOr<int64_t> NumKeys() override { return Gone(); }

 private:
  static absl::Status Gone() { return absl::UnavailableError("TCP store at 10.0.0.1:29500: connection refused"); }
};

PostmortemOptions Options(Store* store, const std::string& dump_dir, int entries = 100) {
  PostmortemOptions options;
  options.recorder = FlightRecorderOptions{entries, dump_dir};
  options.group_id = "test-group";
  options.store = store;
  options.window = absl::Milliseconds(300);
  return options;
}

CollectiveSpec Spec() {
  CollectiveSpec spec;
  spec.kind = CollectiveKind::kAllReduce;
  spec.numel = 4;
  return spec;
}

// Records calls 0..n-1 in `pm`'s recorder: all completed but the last, which is running.
std::vector<std::shared_ptr<AsyncWork>> RecordCalls(GroupPostmortem& pm, int n) {
  std::vector<std::shared_ptr<AsyncWork>> works;
  for (int i = 0; i < n; ++i) {
    works.push_back(std::make_shared<AsyncWork>("call"));
    absl::MutexLock lock(&pm.recorder()->mu());
    pm.recorder()->Record(i, Spec(), works.back());
    works.back()->MarkStarted();
    if (i + 1 < n) works.back()->Complete(absl::OkStatus());
  }
  return works;
}

CollectiveCall CallOf(uint32_t sequence) { return CollectiveCall{sequence, Spec().Signature()}; }

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

TEST(GroupPostmortemTest, TheSilentRankIsNamedAndTheDumpWritten) {
  MemoryStore store;
  const std::string dir = TestDir("pm_silent");
  GroupPostmortem rank0("gloo", 0, 2, absl::Seconds(5), Options(&store, dir));
  auto works = RecordCalls(rank0, 4);
  const PostmortemResult result = rank0.Explain("AllReduce(sum) #3 ... not completed after 5s", CallOf(3));
  EXPECT_THAT(result.text, HasSubstr(" [failure reports: lost rank 1 (no report within 300ms"));
  EXPECT_THAT(result.text, HasSubstr("[flight recorder: rank 1 is behind: no progress report within 300ms from rank 1 "
                                     "(stopped, hung, or busy outside collectives); it has not completed AllReduce(sum) "
                                     "#3 of 4 float32, which rank 0 is in (running for "));
  EXPECT_THAT(result.text, HasSubstr("after completing every call through #2)"));
  const std::string path = dir + "/test-group/rank0.jsonl";
  EXPECT_THAT(result.text, HasSubstr(absl::StrCat("; dump ", path, "; every rank's: flight_recorder_report ", dir,
                                                  "/test-group]")));
  absl::StatusOr<std::string> text = ReadFile(path);
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<FlightDump> dump = DecodeFlightDump(*text, path);
  ASSERT_TRUE(dump.ok()) << dump.status();
  EXPECT_EQ(dump->header.reason, "AllReduce(sum) #3 ... not completed after 5s");
  EXPECT_EQ(dump->header.group_id, "test-group");
  ASSERT_EQ(dump->entries.size(), 4u);
  EXPECT_EQ(dump->entries[3].state, FlightState::kStarted);
  // Later failures repeat the first explanation, without a second exchange or dump.
  EXPECT_EQ(rank0.Explain("later", CallOf(4)).text, result.text);
}

TEST(GroupPostmortemTest, RanksThatReportAreComparedAndTheirCallsReturned) {
  MemoryStore store;
  const std::string dir = TestDir("pm_both");
  PostmortemOptions options = Options(&store, dir);
  options.window = absl::Seconds(30);  // ends as soon as both reported; long, so a slow thread start is no failure
  GroupPostmortem rank0("gloo", 0, 2, absl::Seconds(5), options);
  GroupPostmortem rank1("gloo", 1, 2, absl::Seconds(5), options);
  auto works0 = RecordCalls(rank0, 8);  // in #7
  auto works1 = RecordCalls(rank1, 7);  // in #6: behind
  PostmortemResult result1;
  std::thread other([&] { result1 = rank1.Explain("rank 1's error", CallOf(6)); });
  const PostmortemResult result0 = rank0.Explain("rank 0's error", CallOf(7));
  other.join();
  for (const PostmortemResult* r : std::vector<const PostmortemResult*>{&result0, &result1}) {
    EXPECT_THAT(r->text, HasSubstr("[failure reports: every rank reported a failure, none was lost]"));
    EXPECT_THAT(r->text, HasSubstr("[flight recorder: rank 1 is behind: it is in AllReduce(sum) #6 of 4 float32 "
                                   "(running for "));
    EXPECT_THAT(r->text, HasSubstr("while rank 0 is in AllReduce(sum) #7 of 4 float32"));
    ASSERT_EQ(r->calls.size(), 2u);
    EXPECT_EQ(r->calls.at(0).sequence, 7u);
    EXPECT_EQ(r->calls.at(1).sequence, 6u);
  }
  EXPECT_TRUE(Exists(dir + "/test-group/rank0.jsonl"));
  EXPECT_TRUE(Exists(dir + "/test-group/rank1.jsonl"));
}

TEST(GroupPostmortemTest, AGoneStoreNamesTheRankThatServesIt) {
  GoneStore store;
  PostmortemOptions options = Options(&store, TestDir("pm_gone"));
  options.store_host_rank = 0;
  GroupPostmortem rank1("gloo", 1, 2, absl::Seconds(5), options);
  auto works = RecordCalls(rank1, 3);
  const std::string text = rank1.Explain("error", CallOf(2)).text;
  EXPECT_THAT(text, HasSubstr("[failure reports unavailable: TCP store at 10.0.0.1:29500: connection refused; rank 0 "
                              "serves the store, so it is gone or not responding (dead, stopped or cut off)]"));
  EXPECT_THAT(text, HasSubstr("[flight recorder: rank 1 is in AllReduce(sum) #2 of 4 float32 (running for "));
  EXPECT_THAT(text, HasSubstr("the other ranks' progress is unknown (the store is unavailable); dump "));
}

TEST(GroupPostmortemTest, WithoutAStoreOnlyThisRanksProgress) {
  GroupPostmortem rank0("shm", 0, 2, absl::Seconds(5), Options(nullptr, TestDir("pm_nostore")));
  auto works = RecordCalls(rank0, 2);
  const std::string text = rank0.Explain("error", CallOf(1)).text;
  EXPECT_THAT(text, Not(HasSubstr("failure reports")));
  EXPECT_THAT(text, HasSubstr(" [flight recorder: rank 0 is in AllReduce(sum) #1 of 4 float32"));
  EXPECT_THAT(text, HasSubstr("the other ranks' progress is unknown (no store to exchange it)"));
}

TEST(GroupPostmortemTest, DumpWritesOnceAndOffWritesNothing) {
  const std::string dir = TestDir("pm_dump");
  GroupPostmortem on("shm", 1, 2, absl::Seconds(5), Options(nullptr, dir));
  auto works = RecordCalls(on, 2);
  on.Dump("first failure");
  on.Dump("second failure");
  absl::StatusOr<std::string> text = ReadFile(dir + "/test-group/rank1.jsonl");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("\"reason\":\"first failure\""));

  GroupPostmortem off("shm", 0, 2, absl::Seconds(5), Options(nullptr, dir, /*entries=*/0));
  EXPECT_FALSE(off.recorder()->enabled());
  off.Dump("failure");
  EXPECT_FALSE(Exists(dir + "/test-group/rank0.jsonl"));
  EXPECT_THAT(off.Explain("error", std::nullopt).text,
              HasSubstr("[flight recorder: this rank recorded no calls (DDP_FLIGHT_RECORDER_ENTRIES=0)]"));
}

TEST(GroupPostmortemTest, DetachedFromTheStore) {
  MemoryStore store;
  GroupPostmortem rank0("gloo", 0, 2, absl::Seconds(5), Options(&store, TestDir("pm_detached")));
  auto works = RecordCalls(rank0, 1);
  rank0.Detach();
  const std::string text = rank0.Explain("error", CallOf(0)).text;
  EXPECT_THAT(text, Not(HasSubstr("failure reports")));
  EXPECT_EQ(store.NumKeys().value(), 0);
}

TEST(AgreeFlightGroupIdTest, RankZeroDecides) {
  MemoryStore store;
  absl::StatusOr<std::string> zero = AgreeFlightGroupId(store, 0, absl::Seconds(1));
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_THAT(*zero, ::testing::MatchesRegex("[0-9]{8}-[0-9]{6}-pid[0-9]+"));
  absl::StatusOr<std::string> one = AgreeFlightGroupId(store, 1, absl::Seconds(1));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, *zero);
  MemoryStore empty;
  absl::StatusOr<std::string> missing = AgreeFlightGroupId(empty, 1, absl::Milliseconds(50));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("flight recorder: no group id from rank 0"));
}

}  // namespace
}  // namespace ddp
