// The elastic regroup's agreement (Note [Elastic regroup]), with survivors as threads over one
// MemoryStore: a lost member reported by the launcher, a silent member counted lost at the timeout, a
// late arrival left out, the step reconciliation's source, and the decision's text format; and the
// admission of a replacement (Note [Elastic join]): who counts as waiting, the planned regroup that adds
// it, the wait that reads its admission, and the wait's timeout.
#include "comm/elastic_membership.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "store/memory_store.h"
#include "store/store_keys.h"

namespace ddp {
namespace {

// Runs AgreeNextGeneration for each (member, step) on its own thread; returns the results in order.
std::vector<absl::StatusOr<Generation>> Regroup(Store& store, const Generation& failed,
                                                const std::vector<std::pair<int, int64_t>>& survivors,
                                                const RegroupOptions& options) {
  std::vector<absl::StatusOr<Generation>> results(survivors.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < survivors.size(); ++i) {
    threads.emplace_back([&, i] {
      results[i] = AgreeNextGeneration(store, failed, survivors[i].first, survivors[i].second, options);
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

TEST(ElasticMembershipTest, SurvivorsOfALostMemberAgreeOnTheRestAtOnce) {
  MemoryStore store;
  ASSERT_TRUE(store.Add(ElasticLostKey(2), 1).ok());  // what ddprun's elastic mode records
  RegroupOptions options;
  options.arrival_timeout = absl::Seconds(60);  // never reached: the launcher's word suffices
  const absl::Time start = absl::Now();
  const auto results = Regroup(store, FirstGeneration(3), {{0, 20}, {1, 20}}, options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (const auto& result : results) {
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->number, 1);
    EXPECT_EQ(result->members, (std::vector<int>{0, 1}));
    EXPECT_EQ(result->steps, (std::vector<int64_t>{20, 20}));
    EXPECT_EQ(result->SourceRank(), 0);
  }
}

TEST(ElasticMembershipTest, TheStateComesFromTheLowestRankThatCompletedTheMostSteps) {
  MemoryStore store;
  ASSERT_TRUE(store.Add(ElasticLostKey(0), 1).ok());
  RegroupOptions options;
  const auto results = Regroup(store, FirstGeneration(4), {{1, 6}, {2, 7}, {3, 7}}, options);
  for (const auto& result : results) {
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->members, (std::vector<int>{1, 2, 3}));
    EXPECT_EQ(result->SourceRank(), 1);  // launch rank 2, new rank 1
    EXPECT_EQ(result->MaxStep(), 7);
    EXPECT_EQ(result->RankOf(3), 2);
    EXPECT_EQ(result->RankOf(0), -1);
  }
}

TEST(ElasticMembershipTest, ASilentMemberIsCountedLostAtTheArrivalTimeout) {
  MemoryStore store;  // nobody reports launch rank 1: no launcher
  RegroupOptions options;
  options.arrival_timeout = absl::Milliseconds(200);
  const auto results = Regroup(store, FirstGeneration(3), {{0, 3}, {2, 3}}, options);
  for (const auto& result : results) {
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->members, (std::vector<int>{0, 2}));
  }
  // Launch rank 1 turns up after the decision: it is told it was left out, and the decision stands.
  const absl::StatusOr<Generation> late = AgreeNextGeneration(store, FirstGeneration(3), 1, 3, options);
  EXPECT_TRUE(absl::IsAborted(late.status())) << late.status();
  EXPECT_NE(late.status().message().find("arrived after the survivors"), std::string::npos) << late.status();
}

TEST(ElasticMembershipTest, ALaterGenerationRegroupsInItsOwnKeys) {
  MemoryStore store;
  ASSERT_TRUE(store.Add(ElasticLostKey(2), 1).ok());
  const auto first = Regroup(store, FirstGeneration(3), {{0, 5}, {1, 5}}, RegroupOptions{});
  ASSERT_TRUE(first[0].ok()) << first[0].status();
  ASSERT_TRUE(store.Add(ElasticLostKey(0), 1).ok());
  const absl::StatusOr<Generation> second = AgreeNextGeneration(store, *first[0], 1, 9, RegroupOptions{});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->number, 2);
  EXPECT_EQ(second->members, (std::vector<int>{1}));
  EXPECT_EQ(second->steps, (std::vector<int64_t>{9}));
}

TEST(ElasticMembershipTest, ANonMemberIsRefused) {
  MemoryStore store;
  const absl::StatusOr<Generation> result = AgreeNextGeneration(store, FirstGeneration(2), 5, 0, RegroupOptions{});
  EXPECT_TRUE(absl::IsFailedPrecondition(result.status())) << result.status();
}

TEST(ElasticMembershipTest, DecisionsRoundTripAndMalformedOnesAreNamed) {
  Generation g;
  g.number = 3;
  g.members = {0, 2};
  g.steps = {11, 12};
  const std::string text = EncodeGenerationDecision(g);
  EXPECT_EQ(text, "members=0,2;steps=11,12");
  const absl::StatusOr<Generation> back = DecodeGenerationDecision(3, text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->members, g.members);
  EXPECT_EQ(back->steps, g.steps);
  EXPECT_EQ(back->ToString(), "generation 3: launch ranks 0, 2 (completed steps 11, 12)");
  for (const char* bad : {"", "members=;steps=", "members=1,0;steps=1,1", "members=0;steps=1,2", "members=0,0;steps=1,1",
                          "members=x;steps=1", "steps=1;members=0"}) {
    const absl::StatusOr<Generation> parsed = DecodeGenerationDecision(1, bad);
    EXPECT_TRUE(absl::IsDataLoss(parsed.status())) << bad;
  }
}

// Replacements: member ids 3 and up in a job of 3. Only registered, unknown, not lost ones wait.
TEST(ElasticMembershipTest, WaitingJoinersAreTheRegisteredReplacementsNotYetMembersNorLost) {
  MemoryStore store;
  ASSERT_TRUE(store.Add(ElasticReplacementsKey(), 4).ok());  // ddprun started members 3, 4, 5, 6
  ASSERT_TRUE(RegisterJoiner(store, 3).ok());                 // admitted already: a member
  ASSERT_TRUE(RegisterJoiner(store, 4).ok());                 // lost while waiting
  ASSERT_TRUE(store.Add(ElasticLostKey(4), 1).ok());
  ASSERT_TRUE(RegisterJoiner(store, 6).ok());                 // 5 has not registered yet
  const absl::StatusOr<std::vector<int>> waiting = WaitingJoiners(store, 3, {0, 1, 3});
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_EQ(*waiting, (std::vector<int>{6}));
}

// Every member alive and one replacement waiting: the regroup adds it last with step -1, the state comes
// from a member that holds it, and the replacement's wait returns the same decision.
TEST(ElasticMembershipTest, APlannedRegroupAdmitsTheWaitingReplacement) {
  MemoryStore store;
  ASSERT_TRUE(store.Add(ElasticReplacementsKey(), 1).ok());
  ASSERT_TRUE(RegisterJoiner(store, 3).ok());
  Generation current;
  current.number = 1;
  current.members = {0, 1};
  current.steps = {12, 12};
  absl::StatusOr<Generation> admitted = absl::UnknownError("not run");
  std::thread joiner([&] {
    AdmissionOptions options;
    options.timeout = absl::Seconds(60);
    admitted = AwaitAdmission(store, 3, options);
  });
  std::vector<absl::StatusOr<Generation>> results(2, absl::UnknownError("not run"));
  std::vector<std::thread> members;
  for (int m = 0; m < 2; ++m) {
    members.emplace_back([&, m] {
      results[m] = AgreeNextGeneration(store, current, m, 20, RegroupOptions{}, {3});
      if (results[m].ok()) ASSERT_TRUE(AnnounceAdmissions(store, *results[m]).ok());
    });
  }
  for (std::thread& t : members) t.join();
  joiner.join();
  for (const auto& result : results) {
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->number, 2);
    EXPECT_EQ(result->members, (std::vector<int>{0, 1, 3}));
    EXPECT_EQ(result->steps, (std::vector<int64_t>{20, 20, -1}));
    EXPECT_EQ(result->SourceRank(), 0);
    EXPECT_EQ(result->Joiners(), (std::vector<int>{3}));
  }
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->members, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(admitted->RankOf(3), 2);
}

TEST(ElasticMembershipTest, AReplacementNobodyAdmitsTimesOutNamingWhatItWaitedFor) {
  MemoryStore store;
  ASSERT_TRUE(RegisterJoiner(store, 5).ok());
  AdmissionOptions options;
  options.timeout = absl::Milliseconds(300);
  options.poll_interval = absl::Milliseconds(50);
  const absl::StatusOr<Generation> admitted = AwaitAdmission(store, 5, options);
  ASSERT_TRUE(absl::IsDeadlineExceeded(admitted.status())) << admitted.status();
  EXPECT_NE(admitted.status().message().find("replacement member 5 was not admitted within"), std::string::npos)
      << admitted.status();
  EXPECT_NE(admitted.status().message().find(ElasticAdmittedKey(5)), std::string::npos) << admitted.status();
}

TEST(ElasticMembershipTest, AReplacementStopsWaitingWhenTheJobEnds) {
  MemoryStore store;
  ASSERT_TRUE(store.Add(ElasticClosedKey(), 1).ok());
  AdmissionOptions options;
  options.poll_interval = absl::Milliseconds(20);
  const absl::StatusOr<Generation> admitted = AwaitAdmission(store, 3, options);
  ASSERT_TRUE(absl::IsFailedPrecondition(admitted.status())) << admitted.status();
  EXPECT_NE(admitted.status().message().find("before the job ended"), std::string::npos) << admitted.status();
}

// A replacement that never received the state cannot be the source: with only it left, the regroup fails.
TEST(ElasticMembershipTest, ReplacementsWithoutStateAloneCannotContinue) {
  MemoryStore store;
  ASSERT_TRUE(store.Add(ElasticLostKey(0), 1).ok());
  Generation failed;
  failed.number = 2;
  failed.members = {0, 3};
  failed.steps = {20, -1};
  const absl::StatusOr<Generation> next = AgreeNextGeneration(store, failed, 3, -1, RegroupOptions{});
  ASSERT_TRUE(absl::IsFailedPrecondition(next.status())) << next.status();
  EXPECT_NE(next.status().message().find("holds the training state"), std::string::npos) << next.status();
}

}  // namespace
}  // namespace ddp
