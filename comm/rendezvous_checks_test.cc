// Rendezvous checks: world-size disagreement named by value and rank; ranks that never joined.
#include "comm/rendezvous_checks.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "store/memory_store.h"

namespace ddp {
namespace {

TEST(RendezvousChecksTest, SameWorldSizePasses) {
  MemoryStore store;
  for (int rank : {2, 0, 1}) EXPECT_TRUE(CheckSameWorldSize(store, rank, 3).ok()) << rank;
}

TEST(RendezvousChecksTest, DifferentWorldSizeNamesBothValues) {
  MemoryStore store;
  ASSERT_TRUE(CheckSameWorldSize(store, 0, 2).ok());
  absl::Status status = CheckSameWorldSize(store, 1, 3);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "rank 1 was started with WORLD_SIZE=3 but rank 0 with WORLD_SIZE=2 (every rank of a group needs "
            "the same world size)");
  // A rank left waiting for rank 1 learns why it never joined.
  EXPECT_EQ(DescribeNeverJoined(store, {1}), "rank 1 never joined (rank 1 was started with WORLD_SIZE=3)");
}

TEST(RendezvousChecksTest, NeverJoinedNamesTheMissingRanks) {
  MemoryStore store;
  auto key = [](int r) { return absl::StrCat("here/", r); };
  ASSERT_TRUE(store.Set(key(0), "x").ok());
  ASSERT_TRUE(store.Set(key(2), "x").ok());
  const std::vector<int> missing = RanksNotJoined(store, /*rank=*/0, /*size=*/5, key);
  EXPECT_EQ(missing, (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(DescribeNeverJoined(store, missing), "ranks 1, 3, 4 never joined");
  EXPECT_EQ(DescribeNeverJoined(store, {}), "");
}

}  // namespace
}  // namespace ddp
