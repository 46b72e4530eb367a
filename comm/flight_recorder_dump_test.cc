// The dump format: written and read back unchanged, self-describing, strict about what it reads, and
// careful about what it replaces.
#include "comm/flight_recorder_dump.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/file.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

FlightDump SampleDump(int rank) {
  FlightDump dump;
  dump.header.group_id = "20261203-101010-pid7";
  dump.header.backend = "gloo";
  dump.header.rank = rank;
  dump.header.size = 2;
  dump.header.host = "node1";
  dump.header.pid = 4711;
  dump.header.dumped_at = absl::FromUnixMicros(1'800'000'000'000'000);
  dump.header.timeout = absl::Seconds(5);
  dump.header.capacity = 2000;
  dump.header.recorded = 2;
  dump.header.reason = "AllReduce(sum) #1 of 3 int64 on rank 0/2 (gloo): not completed after 5s";
  FlightEntry done;
  done.record = 0;
  done.sequence = 0;
  done.spec.kind = CollectiveKind::kBroadcast;
  done.spec.root = 1;
  done.spec.numel = 10;
  done.spec.dtype = DType::kBFloat16;
  done.state = FlightState::kCompleted;
  done.issued = absl::FromUnixMicros(1'799'999'990'000'000);
  done.started = done.issued + absl::Microseconds(3);
  done.ended = done.started + absl::Microseconds(40);
  FlightEntry stuck;
  stuck.record = 1;
  stuck.sequence = 1;
  stuck.spec.kind = CollectiveKind::kAllReduce;
  stuck.spec.op = ReduceOp::kMax;
  stuck.spec.numel = 3;
  stuck.spec.dtype = DType::kInt64;
  stuck.state = FlightState::kStarted;
  stuck.issued = absl::FromUnixMicros(1'799'999'995'000'000);
  stuck.started = stuck.issued;
  FlightEntry recv;
  recv.record = 2;
  recv.spec.kind = CollectiveKind::kRecv;
  recv.spec.root = 1;
  recv.spec.tag = 7;
  recv.spec.numel = 4;
  recv.state = FlightState::kFailed;
  recv.issued = stuck.issued;
  recv.error = "peer \"gone\"\nnext line";
  dump.entries = {done, stuck, recv};
  return dump;
}

void ExpectSameEntry(const FlightEntry& a, const FlightEntry& b) {
  EXPECT_EQ(a.record, b.record);
  EXPECT_EQ(a.sequence, b.sequence);
  EXPECT_EQ(a.spec.Signature(), b.spec.Signature());
  EXPECT_EQ(a.spec.tag, b.spec.tag);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.issued, b.issued);
  EXPECT_EQ(a.started, b.started);
  EXPECT_EQ(a.ended, b.ended);
  EXPECT_EQ(a.error, b.error);
}

TEST(FlightDumpTest, RoundTrips) {
  const FlightDump dump = SampleDump(0);
  const std::string text = EncodeFlightDump(dump);
  absl::StatusOr<FlightDump> back = DecodeFlightDump(text, "x.jsonl");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->header.group_id, dump.header.group_id);
  EXPECT_EQ(back->header.backend, "gloo");
  EXPECT_EQ(back->header.rank, 0);
  EXPECT_EQ(back->header.size, 2);
  EXPECT_EQ(back->header.host, "node1");
  EXPECT_EQ(back->header.pid, 4711);
  EXPECT_EQ(back->header.dumped_at, dump.header.dumped_at);
  EXPECT_EQ(back->header.timeout, absl::Seconds(5));
  EXPECT_EQ(back->header.recorded, 2u);
  EXPECT_EQ(back->header.reason, dump.header.reason);
  ASSERT_EQ(back->entries.size(), dump.entries.size());
  for (size_t i = 0; i < dump.entries.size(); ++i) ExpectSameEntry(back->entries[i], dump.entries[i]);
}

TEST(FlightDumpTest, ExplainsItself) {
  const std::string text = EncodeFlightDump(SampleDump(1));
  // One JSON object per line; the header first, with its format and a guide to the entries' fields.
  EXPECT_TRUE(absl::StartsWith(text, "{\"format\":\"ddp-flight-recorder\",\"version\":1,")) << text;
  EXPECT_THAT(text, HasSubstr("\"fields\":{"));
  EXPECT_THAT(text, HasSubstr("\"seq\":\"the group's sequence number"));
  EXPECT_THAT(text, HasSubstr("\"seq\":1,\"call\":\"AllReduce(max) of 3 int64\""));
  EXPECT_THAT(text, HasSubstr("\"call\":\"Broadcast(root 1) of 10 bfloat16\""));
  EXPECT_THAT(text, HasSubstr("\"seq\":null,\"call\":\"Recv(from rank 1, tag 7) of 4 float32\""));
  EXPECT_THAT(text, HasSubstr("\"bytes\":20,"));
  EXPECT_THAT(text, HasSubstr("\"ended_us\":null"));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
}

TEST(FlightDumpTest, RejectsWhatIsNotADump) {
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"", "x.jsonl:1: not a flight recorder dump (empty)"},
           {"{\"a\": 1}\n", "x.jsonl:1: not a flight recorder dump (no \"format\" header)"},
           {"{\"format\":\"ddp-flight-recorder\",\"version\":9}\n", "version 9, this reader knows 1"},
           {"not json\n", "x.jsonl:1: not a flight recorder dump (a line is not JSON)"},
       }) {
    absl::StatusOr<FlightDump> dump = DecodeFlightDump(text, "x.jsonl");
    ASSERT_FALSE(dump.ok()) << text;
    EXPECT_EQ(dump.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(dump.status().message(), HasSubstr(expected));
  }
  std::string text = EncodeFlightDump(SampleDump(0));
  absl::StatusOr<FlightDump> bad_entry = DecodeFlightDump(text + "{\"record\":3,\"kind\":\"Teleport\",\"state\":\"issued\"}\n", "x.jsonl");
  ASSERT_FALSE(bad_entry.ok());
  EXPECT_THAT(bad_entry.status().message(), HasSubstr("x.jsonl:5:"));
}

TEST(FlightDumpTest, WritesIntoNewFoldersAndReadsThemBackByRank) {
  const std::string base = TestDir("dumps_base");
  for (int rank : {1, 0}) {
    FlightDump dump = SampleDump(rank);
    const std::string path = FlightDumpPath(base, dump.header.group_id, rank);
    EXPECT_EQ(path, absl::StrCat(base, "/20261203-101010-pid7/rank", rank, ".jsonl"));
    ASSERT_TRUE(WriteFlightDump(path, dump).ok());
  }
  absl::StatusOr<std::vector<FlightDump>> dumps = ReadFlightDumps(base + "/20261203-101010-pid7");
  ASSERT_TRUE(dumps.ok()) << dumps.status();
  ASSERT_EQ(dumps->size(), 2u);
  EXPECT_EQ((*dumps)[0].header.rank, 0);
  EXPECT_EQ((*dumps)[1].header.rank, 1);
}

TEST(FlightDumpTest, RefusesToReplaceWhatIsNotARegularFile) {
  const std::string dir = TestDir("dumps_fifo");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string fifo = dir + "/rank0.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const absl::Status written = WriteFlightDump(fifo, SampleDump(0));
  EXPECT_EQ(written.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(written.message(), HasSubstr(fifo + " exists and is not a regular file"));
  struct stat st;
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(FlightDumpTest, ReadingAFolderNamesABadFile) {
  const std::string dir = TestDir("dumps_bad");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomically(dir + "/rank0.jsonl", "hello\n").ok());
  absl::StatusOr<std::vector<FlightDump>> dumps = ReadFlightDumps(dir);
  ASSERT_FALSE(dumps.ok());
  EXPECT_THAT(dumps.status().message(), HasSubstr(dir + "/rank0.jsonl:1"));
  EXPECT_EQ(ReadFlightDumps(dir + "/missing").status().code(), absl::StatusCode::kNotFound);
}

TEST(FlightDumpTest, BaseFolder) {
  EXPECT_EQ(FlightDumpBaseDir("/given"), "/given");
  setenv("TMPDIR", "/scratch", 1);
  EXPECT_EQ(FlightDumpBaseDir(""), "/scratch/ddp-flight-recorder");
  unsetenv("TMPDIR");
  EXPECT_EQ(FlightDumpBaseDir(""), "/tmp/ddp-flight-recorder");
}

}  // namespace
}  // namespace ddp
