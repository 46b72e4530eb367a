// The c10d node rendezvous (launch/node_rendezvous.h) with nodes as threads over one MemoryStore.
#include "launch/node_rendezvous.h"

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/memory_store.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

NodeRendezvousOptions Node(bool host, int min_nodes, int max_nodes) {
  NodeRendezvousOptions o;
  o.is_host = host;
  o.min_nodes = min_nodes;
  o.max_nodes = max_nodes;
  o.nproc_per_node = 2;
  o.run_id = "job";
  o.join_timeout = absl::Seconds(20);
  o.last_call_timeout = absl::Seconds(20);
  if (host) {
    o.master_addr = "10.0.0.1";
    o.worker_master_port = 1234;
    o.job_id = "jid";
  }
  return o;
}

// Runs the host and `joiners` other nodes at once; returns their results (host first).
std::vector<absl::StatusOr<NodeAssignment>> Meet(MemoryStore& store, const NodeRendezvousOptions& host,
                                                 const std::vector<NodeRendezvousOptions>& joiners) {
  std::vector<absl::StatusOr<NodeAssignment>> results(joiners.size() + 1, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  threads.emplace_back([&] { results[0] = JoinNodeRendezvous(store, host); });
  for (size_t i = 0; i < joiners.size(); ++i) {
    threads.emplace_back([&, i] { results[i + 1] = JoinNodeRendezvous(store, joiners[i]); });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

TEST(NodeRendezvousTest, FullJobGetsDistinctRanksAndTheHostsDecisions) {
  MemoryStore store;
  auto results = Meet(store, Node(true, 3, 3), {Node(false, 3, 3), Node(false, 3, 3)});
  std::vector<bool> seen(3, false);
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->nnodes, 3);
    EXPECT_EQ(r->master_addr, "10.0.0.1");
    EXPECT_EQ(r->worker_master_port, 1234);
    EXPECT_EQ(r->job_id, "jid");
    ASSERT_GE(r->node_rank, 0);
    ASSERT_LT(r->node_rank, 3);
    EXPECT_FALSE(seen[r->node_rank]);
    seen[r->node_rank] = true;
  }
  EXPECT_EQ(results[0]->node_rank, 0);
}

// --nnodes=1:3 with one other node: the rendezvous closes after last_call_timeout with 2 nodes, and a
// node that comes later is told it closed.
TEST(NodeRendezvousTest, ElasticRangeClosesAfterLastCall) {
  MemoryStore store;
  NodeRendezvousOptions host = Node(true, 2, 3);
  host.last_call_timeout = absl::Milliseconds(300);
  auto results = Meet(store, host, {Node(false, 2, 3)});
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[1].ok()) << results[1].status();
  EXPECT_EQ(results[0]->nnodes, 2);
  EXPECT_EQ(results[1]->node_rank, 1);
  auto late = JoinNodeRendezvous(store, Node(false, 2, 3));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.status().message(), HasSubstr("closed with 2 nodes"));
}

TEST(NodeRendezvousTest, TooFewNodesTimeOutNamingTheCount) {
  MemoryStore store;
  NodeRendezvousOptions host = Node(true, 3, 3);
  host.join_timeout = absl::Milliseconds(300);
  NodeRendezvousOptions joiner = Node(false, 3, 3);
  joiner.join_timeout = absl::Seconds(20);
  auto results = Meet(store, host, {joiner});
  EXPECT_EQ(results[0].status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(results[0].status().message(), HasSubstr("only 2 of at least 3 nodes"));
  EXPECT_FALSE(results[1].ok());  // the joiner learns of the failure at once, not after its own timeout
  EXPECT_THAT(results[1].status().message(), HasSubstr("only 2 of at least 3"));
}

// A node of another job that reaches the endpoint before its host cannot claim it: only the host writes
// the run id, so the real job still meets there and the stranger is refused.
TEST(NodeRendezvousTest, AStrangerArrivingBeforeTheHostDoesNotLockTheJobOut) {
  MemoryStore store;
  NodeRendezvousOptions stranger = Node(false, 2, 2);
  stranger.run_id = "other";
  absl::StatusOr<NodeAssignment> refused = absl::UnknownError("not run");
  std::thread early([&] { refused = JoinNodeRendezvous(store, stranger); });
  absl::SleepFor(absl::Milliseconds(100));
  auto results = Meet(store, Node(true, 2, 2), {Node(false, 2, 2)});
  early.join();
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[1].ok()) << results[1].status();
  EXPECT_EQ(results[1]->node_rank, 1);
  EXPECT_THAT(refused.status().message(), HasSubstr("for --rdzv_id=job, not --rdzv_id=other"));
}

TEST(NodeRendezvousTest, RefusesAnotherRunIdAndUnequalWorkerCounts) {
  MemoryStore store;
  NodeRendezvousOptions other = Node(false, 2, 2);
  other.run_id = "other";
  NodeRendezvousOptions host = Node(true, 2, 2);
  host.join_timeout = absl::Milliseconds(300);
  auto results = Meet(store, host, {other});
  EXPECT_THAT(results[1].status().message(), HasSubstr("for --rdzv_id=job, not --rdzv_id=other"));

  MemoryStore store2;
  NodeRendezvousOptions four = Node(false, 2, 2);
  four.nproc_per_node = 4;
  auto unequal = Meet(store2, Node(true, 2, 2), {four});
  EXPECT_THAT(unequal[0].status().message(), HasSubstr("node 1 runs --nproc_per_node=4 but node 0 runs 2"));
  EXPECT_THAT(unequal[1].status().message(), HasSubstr("node 1 runs --nproc_per_node=4"));
}

TEST(NodeRendezvousTest, MoreThanMaxNodesIsRefused) {
  MemoryStore store;
  auto results = Meet(store, Node(true, 2, 2), {Node(false, 2, 2)});
  ASSERT_TRUE(results[0].ok());
  auto extra = JoinNodeRendezvous(store, Node(false, 2, 2));
  EXPECT_THAT(extra.status().message(), HasSubstr("at most 2 nodes"));
}

}  // namespace
}  // namespace ddp
