// The elastic regroup's agreement (Note [Elastic regroup]), with survivors as threads over one
// MemoryStore: a lost member reported by the launcher, a silent member counted lost at the timeout, a
// late arrival left out, the step reconciliation's source, and the decision's text format.
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

}  // namespace
}  // namespace ddp
