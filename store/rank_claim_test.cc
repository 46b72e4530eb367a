// ClaimRank: a place already held by another process, or a store serving another job, is refused naming
// the store; the same process may claim again.
#include "store/rank_claim.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/memory_store.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

RankClaim Claim(int rank, const std::string& job_id = "") {
  return RankClaim{rank, job_id, "127.0.0.1:29500 (MASTER_ADDR:MASTER_PORT)"};
}

TEST(RankClaimTest, EachRankOnceAndTheSameProcessAgain) {
  MemoryStore store;
  EXPECT_TRUE(ClaimRank(store, Claim(0)).ok());
  EXPECT_TRUE(ClaimRank(store, Claim(1)).ok());
  EXPECT_TRUE(ClaimRank(store, Claim(1)).ok()) << "a retried rendezvous keeps its place";
}

// Another process holds rank 1 (its claim is written as that process would write it).
TEST(RankClaimTest, APlaceHeldByAnotherProcessNamesThePortAndTheHolder) {
  MemoryStore store;
  ASSERT_TRUE(ClaimRank(store, Claim(0)).ok());
  ASSERT_TRUE(store.Set("rank_claim/rank1", "0123456789abcdef pid 4242 on otherhost").ok());
  const absl::Status taken = ClaimRank(store, Claim(1));
  EXPECT_TRUE(absl::IsFailedPrecondition(taken)) << taken;
  EXPECT_THAT(taken.message(), HasSubstr("rank 1 cannot join: the job at 127.0.0.1:29500 (MASTER_ADDR:MASTER_PORT) "
                                         "already has a rank 1 (pid 4242 on otherhost)"));
  EXPECT_THAT(taken.message(), HasSubstr("Another job is using this port"));
  EXPECT_EQ(*store.Get("rank_claim/rank1", absl::Seconds(1)), "0123456789abcdef pid 4242 on otherhost")
      << "the refused rank changed nothing";
}

TEST(RankClaimTest, ARankOfAnotherJobIsRefusedNamingBothJobs) {
  MemoryStore store;
  ASSERT_TRUE(ClaimRank(store, Claim(0, "aaaa")).ok());
  const absl::Status other = ClaimRank(store, Claim(1, "bbbb"));
  EXPECT_TRUE(absl::IsFailedPrecondition(other)) << other;
  EXPECT_THAT(other.message(), HasSubstr("serves the job DDP_JOB_ID=aaaa, but this process belongs to the job "
                                         "DDP_JOB_ID=bbbb"));
  const absl::Status by_hand = ClaimRank(store, Claim(1));
  EXPECT_THAT(by_hand.message(), HasSubstr("belongs to the job started by hand (no DDP_JOB_ID)"));
}

}  // namespace
}  // namespace ddp
