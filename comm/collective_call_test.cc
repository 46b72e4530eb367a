// CollectiveCall: tags separate calls that differ, the store round trip of calls, and the description of
// ranks that called different collectives.
#include "comm/collective_call.h"

#include <gtest/gtest.h>

#include "store/memory_store.h"

namespace ddp {
namespace {

TEST(CollectiveCallTest, TagKeepsTheSequenceAndSeparatesSignatures) {
  const CollectiveCall a{7, "AllReduce(sum) of 1000 float32"};
  EXPECT_EQ(GlooTag(a) & 0xffffu, 7u);
  EXPECT_EQ(GlooTag(a), GlooTag(CollectiveCall{7, "AllReduce(sum) of 1000 float32"}));
  EXPECT_EQ(GlooTag(CollectiveCall{65536 + 7, a.signature}), GlooTag(a));  // 16 bits of sequence
  for (const char* other : {"AllReduce(sum) of 3 float32", "AllReduce(max) of 1000 float32",
                            "AllReduce(sum) of 1000 bfloat16", "ReduceScatter(sum) of 1000 float32"}) {
    EXPECT_NE(GlooTag(CollectiveCall{7, other}), GlooTag(a)) << other;
  }
}

TEST(CollectiveCallTest, EncodesAndDecodes) {
  const CollectiveCall call{12, "Broadcast(root 0) of 3 int64"};
  std::optional<CollectiveCall> back = DecodeCall(EncodeCall(call));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->sequence, 12u);
  EXPECT_EQ(back->signature, call.signature);
  EXPECT_FALSE(DecodeCall("Barrier").has_value());
  EXPECT_FALSE(DecodeCall("x Barrier").has_value());
}

TEST(CollectiveCallTest, MismatchNamesEveryRankAndCall) {
  const CollectiveCall mine{3, "AllReduce(sum) of 1000 float32"};
  std::map<int, CollectiveCall> others = {{1, {3, "AllReduce(sum) of 3 float32"}},
                                          {2, {3, "AllReduce(sum) of 1000 float32"}},
                                          {3, {3, "AllReduce(sum) of 3 float32"}},
                                          {4, {2, "Barrier"}}};  // another call: says nothing
  EXPECT_EQ(DescribeCallMismatch(0, mine, others),
            "ranks called different collectives at call #3: this rank (0) AllReduce(sum) of 1000 float32, "
            "ranks 1, 3 AllReduce(sum) of 3 float32");
  others.erase(1);
  others.erase(3);
  EXPECT_EQ(DescribeCallMismatch(0, mine, others), "");
}

TEST(CollectiveCallTest, PublishedCallsAreReadBack) {
  MemoryStore store;
  PublishCall(store, "calls/", 0, {5, "Barrier"});
  PublishCall(store, "calls/", 2, {5, "AllGather of 4 int64"});
  ASSERT_TRUE(store.Set("calls/3", "garbage").ok());
  std::map<int, CollectiveCall> calls = ReadOtherCalls(store, "calls/", 0, 4);
  ASSERT_EQ(calls.size(), 1u);  // not this rank's, not rank 1's (none), not rank 3's (unreadable)
  EXPECT_EQ(calls[2].signature, "AllGather of 4 int64");
}

}  // namespace
}  // namespace ddp
