// For tests: runs a function as `world` ranks, each a thread with its own ProcessGroupGloo over one
// shared in-memory store and real TCP over loopback, so multi-rank tests run in one process without a
// launcher.
#ifndef DDP_TESTING_RUN_RANKS_H_
#define DDP_TESTING_RUN_RANKS_H_

#include <functional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "store/memory_store.h"
#include "comm/gloo/process_group_gloo.h"

namespace ddp {

// Calls fn(rank, group) on `world` threads and joins them, each rank with the group that
// create(store, rank) makes over one shared MemoryStore (a StatusOr<std::unique_ptr<G>>). A rank that
// cannot create its group fails the current test (and skips fn). After fn every rank passes a barrier
// before destroying its group, so a rank whose fn did no communication cannot close its connections while
// a peer is still connecting.
template <typename Create, typename Fn>
void RunRanksWith(int world, const Create& create, const Fn& fn) {
  MemoryStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      auto group = create(store, rank);
      ASSERT_TRUE(group.ok()) << group.status();
      fn(rank, **group);
      EXPECT_TRUE((*group)->Barrier()->Wait(absl::Seconds(60)).ok()) << "final barrier of rank " << rank;
    });
  }
  for (auto& t : threads) t.join();
}

// RunRanksWith over ProcessGroupGloo (real TCP over loopback); Gloo options (e.g. a short timeout) may be
// passed.
inline void RunRanks(int world, const std::function<void(int rank, ProcessGroup& group)>& fn,
                     const ProcessGroupGlooOptions& options = {}) {
  RunRanksWith(
      world, [&](Store& store, int rank) { return ProcessGroupGloo::Create(store, rank, world, options); }, fn);
}

}  // namespace ddp

#endif  // DDP_TESTING_RUN_RANKS_H_
