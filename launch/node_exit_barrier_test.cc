// Note [Exit barrier] (launch/node_exit_barrier.h) with nodes as threads over one MemoryStore.
#include "launch/node_exit_barrier.h"

#include <thread>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/memory_store.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

// The barrier opens only when the last of the nodes arrives.
TEST(NodeExitBarrierTest, OpensWhenTheLastNodeArrives) {
  MemoryStore store;
  ASSERT_TRUE(ArriveAtExitBarrier(store, /*nnodes=*/3).ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(store.Wait({"ddprun/exit_barrier/open"}, absl::Milliseconds(20))))
      << "open after 1 of 3";
  ASSERT_TRUE(ArriveAtExitBarrier(store, 3).ok());
  EXPECT_TRUE(WaitAtExitBarrier(store, 3, absl::Seconds(20)).ok());
}

// Node 0 waits for a node that arrives later (another thread), and returns once it has.
TEST(NodeExitBarrierTest, Node0WaitsForTheOtherNode) {
  MemoryStore store;
  absl::Status node0;
  std::thread waiter([&] { node0 = WaitAtExitBarrier(store, 2, absl::Seconds(20)); });
  ASSERT_TRUE(ArriveAtExitBarrier(store, 2).ok());
  waiter.join();
  EXPECT_TRUE(node0.ok()) << node0;
}

// A node that never arrives costs node 0 the timeout, and the error says how many came.
TEST(NodeExitBarrierTest, TimesOutNamingHowManyCame) {
  MemoryStore store;
  const absl::Status status = WaitAtExitBarrier(store, 2, absl::Milliseconds(100));
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("1 of 2 nodes"));
}

}  // namespace
}  // namespace ddp
