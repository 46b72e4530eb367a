// Where a rank stands (ProgressOf) and which rank is behind (DiagnoseProgress), case by case.
#include "comm/flight_recorder_diagnosis.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

FlightEntry Entry(uint64_t sequence, FlightState state, int64_t numel = 4) {
  FlightEntry e;
  e.record = sequence;
  e.sequence = sequence;
  e.spec.kind = CollectiveKind::kAllReduce;
  e.spec.numel = numel;
  e.spec.dtype = DType::kInt64;
  e.state = state;
  e.issued = kNow - absl::Seconds(6);
  if (state != FlightState::kIssued) e.started = kNow - absl::Seconds(5);
  return e;
}

RankProgress At(int64_t last_completed, std::optional<uint64_t> pending, const std::string& call = "AllReduce(sum) of 4 int64",
                FlightState state = FlightState::kStarted) {
  RankProgress p;
  p.last_completed = last_completed;
  if (pending) p.pending = RankProgress::Call{*pending, call, state, absl::Seconds(5)};
  return p;
}

TEST(ProgressOfTest, LastCompletedAndTheOldestPendingCall) {
  FlightEntry send = Entry(0, FlightState::kIssued);
  send.sequence = kUnnumbered;  // not in the common order: ignored
  const RankProgress p = ProgressOf({Entry(250, FlightState::kCompleted), send, Entry(251, FlightState::kCompleted),
                                     Entry(252, FlightState::kStarted), Entry(253, FlightState::kIssued)},
                                    kNow);
  EXPECT_EQ(p.last_completed, 251);
  ASSERT_TRUE(p.pending.has_value());
  EXPECT_EQ(p.pending->sequence, 252u);
  EXPECT_EQ(p.pending->call, "AllReduce(sum) of 4 int64");
  EXPECT_EQ(p.pending->state, FlightState::kStarted);
  EXPECT_EQ(p.pending->age, absl::Seconds(5));  // since it started

  const RankProgress queued = ProgressOf({Entry(7, FlightState::kIssued)}, kNow);
  EXPECT_EQ(queued.last_completed, -1);
  EXPECT_EQ(queued.pending->age, absl::Seconds(6));  // since it was issued

  const RankProgress idle = ProgressOf({Entry(3, FlightState::kCompleted)}, kNow);
  EXPECT_EQ(idle.last_completed, 3);
  EXPECT_FALSE(idle.pending.has_value());
}

TEST(ProgressTest, EncodesAndDecodes) {
  for (const RankProgress& p : {At(251, 252), At(-1, std::nullopt), At(3, 4, "Barrier", FlightState::kIssued)}) {
    absl::StatusOr<RankProgress> back = DecodeProgress(EncodeProgress(p));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->last_completed, p.last_completed);
    ASSERT_EQ(back->pending.has_value(), p.pending.has_value());
    if (!p.pending) continue;
    EXPECT_EQ(back->pending->sequence, p.pending->sequence);
    EXPECT_EQ(back->pending->call, p.pending->call);
    EXPECT_EQ(back->pending->state, p.pending->state);
    EXPECT_EQ(back->pending->age, p.pending->age);
  }
  for (const std::string bad : {"", "[]", "{\"pending\":null}", "{\"last_completed\":1,\"pending\":{\"seq\":-2}}",
                                "{\"last_completed\":1,\"pending\":{\"seq\":2,\"call\":\"x\",\"state\":\"done\"}}"}) {
    EXPECT_FALSE(DecodeProgress(bad).ok()) << bad;
  }
}

TEST(DiagnoseProgressTest, ASilentRankIsBehindInTheCallTheOthersWaitIn) {
  GroupProgress g;
  g.size = 3;
  g.silence = "no progress report within 3s";
  g.heard[0] = At(251, 252);
  g.heard[1] = At(251, 252);
  EXPECT_EQ(DiagnoseProgress(g),
            "rank 2 is behind: no progress report within 3s from rank 2 (stopped, hung, or busy outside "
            "collectives); it has not completed AllReduce(sum) #252 of 4 int64, which ranks 0, 1 are in (running "
            "for 5.0s, after completing every call through #251)");
}

TEST(DiagnoseProgressTest, ALauncherNoticeSaysHowASilentRankEnded) {
  GroupProgress g;
  g.size = 4;
  g.heard[0] = At(9, 10);
  g.heard[2] = At(9, 10);
  g.exited[1] = "exit code 137 (signal 9)";
  const std::string text = DiagnoseProgress(g);
  EXPECT_THAT(text, HasSubstr("ranks 1, 3 are behind: no progress report from rank 3 (stopped, hung, or busy "
                              "outside collectives); rank 1 exited (exit code 137 (signal 9)); they have not "
                              "completed AllReduce(sum) #10 of 4 int64, which ranks 0, 2 are in"));
}

TEST(DiagnoseProgressTest, SilentRankWhileTheOthersAreIdle) {
  GroupProgress g;
  g.size = 2;
  g.heard[0] = At(40, std::nullopt);
  EXPECT_THAT(DiagnoseProgress(g), HasSubstr("rank 1 is behind: no progress report from rank 1 (stopped, hung, or "
                                             "busy outside collectives); rank 0 completed every call through #40"));
}

TEST(DiagnoseProgressTest, TheLowestPositionAmongReportsIsBehind) {
  GroupProgress g;
  g.size = 3;
  g.heard[0] = At(251, 252);
  g.heard[1] = At(250, 251, "Broadcast(root 0) of 10 float32");
  g.heard[2] = At(251, 252);
  EXPECT_EQ(DiagnoseProgress(g),
            "rank 1 is behind: it is in Broadcast(root 0) #251 of 10 float32 (running for 5.0s), while ranks 0, 2 "
            "are in AllReduce(sum) #252 of 4 int64 (running for 5.0s)");
  // A rank that has not issued the call the others are in stands behind them.
  g.heard[1] = At(251, std::nullopt);
  EXPECT_THAT(DiagnoseProgress(g), HasSubstr("rank 1 is behind: it is past #251 with nothing issued since (busy "
                                             "outside collectives), while ranks 0, 2 are in AllReduce(sum) #252"));
}

TEST(DiagnoseProgressTest, NoRankBehind) {
  GroupProgress g;
  g.size = 2;
  g.heard[0] = At(5, 6);
  g.heard[1] = At(5, 6, "AllReduce(sum) of 4 int64", FlightState::kIssued);
  EXPECT_EQ(DiagnoseProgress(g), "no rank is behind: ranks 0, 1 are in AllReduce(sum) #6 of 4 int64 (running for 5.0s)");
  g.heard[1] = At(5, 6, "Broadcast(root 1) of 4 int64");
  EXPECT_EQ(DiagnoseProgress(g),
            "no rank is behind, but the ranks called different collectives at #6: rank 0 AllReduce(sum) of 4 int64, "
            "rank 1 Broadcast(root 1) of 4 int64");
}

TEST(DiagnoseProgressTest, RanksWithoutARecorder) {
  GroupProgress g;
  g.size = 2;
  g.heard[0] = std::nullopt;
  g.heard[1] = std::nullopt;
  EXPECT_EQ(DiagnoseProgress(g), "no rank recorded its calls (DDP_FLIGHT_RECORDER_ENTRIES=0)");
  g.heard[1] = At(5, 6);
  EXPECT_EQ(DiagnoseProgress(g), "no rank is behind: rank 1 is in AllReduce(sum) #6 of 4 int64 (running for 5.0s); "
                                 "rank 0 recorded no calls (DDP_FLIGHT_RECORDER_ENTRIES=0)");
}

TEST(DescribeRankProgressTest, OneRank) {
  EXPECT_EQ(DescribeRankProgress(1, At(57, 58)),
            "rank 1 is in AllReduce(sum) #58 of 4 int64 (running for 5.0s), after completing every call through #57");
  EXPECT_EQ(DescribeRankProgress(0, At(-1, std::nullopt)), "rank 0 is before its first call");
  EXPECT_EQ(DescribeRankProgress(0, At(-1, 0, "Barrier", FlightState::kFailed)), "rank 0 is in Barrier #0 (failed after 5.0s)");
}

}  // namespace
}  // namespace ddp
