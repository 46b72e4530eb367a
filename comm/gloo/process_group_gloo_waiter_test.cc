// Note [Waiter runs the work] (comm/gloo/process_group_gloo.cc): a thread that Waits on a Gloo collective
// that is next in line may run it itself. Results and issue order stay those of the worker path, and a
// Wait shorter than the group's timeout never runs a collective (it would block until the peers come).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "store/memory_store.h"
#include "comm/gloo/process_group_gloo.h"
#include "tensor/factory.h"
#include "testing/run_ranks.h"

namespace ddp {
namespace {

constexpr absl::Duration kGroupTimeout = absl::Seconds(20);

// DDP's pattern: launch a large and a small bucket and a broadcast, then wait for them in order, with the
// group's timeout (as the Reducer does), so the waiting thread may run each one. Every value is checked
// against the sum over ranks; completion callbacks that fire on the waiting thread count the collectives
// the waiter ran.
TEST(GlooWaiterRunsTest, CollectivesWaitedWithTheGroupTimeoutAreRightAndInIssueOrder) {
  ProcessGroupGlooOptions options;
  options.timeout = kGroupTimeout;
  for (int world : {2, 3}) {
    std::atomic<int> ran_by_waiter{0};
    RunRanks(
        world,
        [&](int rank, ProcessGroup& group) {
          constexpr int kSteps = 60;
          for (int step = 0; step < kSteps; ++step) {
            Tensor large = Full({4096}, static_cast<float>(rank + step));
            Tensor small = Full({3}, static_cast<float>(rank * 2));
            Tensor broadcast = Full({5}, static_cast<float>(rank == 0 ? step : -1));
            std::vector<std::shared_ptr<Work>> works = {group.AllReduce(large), group.AllReduce(small),
                                                        group.Broadcast(broadcast, 0)};
            std::atomic<bool> waiting{false};
            const std::thread::id me = std::this_thread::get_id();
            for (auto& work : works) {
              work->AddCompletionCallback([&, me](const absl::Status&) {
                if (waiting.load() && std::this_thread::get_id() == me) ran_by_waiter.fetch_add(1);
              });
            }
            waiting.store(true);
            for (size_t i = 0; i < works.size(); ++i) {
              ASSERT_TRUE(works[i]->Wait(kGroupTimeout).ok()) << "step " << step << " work " << i;
              for (size_t j = 0; j < i; ++j) EXPECT_TRUE(works[j]->IsCompleted());
            }
            waiting.store(false);
            const float sum_ranks = world * (world - 1) / 2.0f;
            EXPECT_EQ(large.ToVector<float>()[4095], sum_ranks + world * step);
            EXPECT_EQ(small.ToVector<float>()[2], 2 * sum_ranks);
            EXPECT_EQ(broadcast.ToVector<float>()[4], static_cast<float>(step));
          }
        },
        options);
    // The waiter reaches the queue before the woken worker in most tries; a run where it never did means
    // the fast path is dead.
    EXPECT_GT(ran_by_waiter.load(), 0) << "world " << world << ": no collective ran on its waiting thread";
  }
}

// Rank 1 issues its all-reduce only after rank 0's short Wait has returned. Had rank 0's Wait run the
// collective, it would block until the group's timeout; it must return DeadlineExceeded on time, and the
// collective then completes normally on the worker.
TEST(GlooWaiterRunsTest, AWaitShorterThanTheGroupTimeoutNeverRunsTheCollective) {
  MemoryStore store;
  ProcessGroupGlooOptions options;
  options.timeout = kGroupTimeout;
  absl::Notification short_wait_returned;
  std::vector<float> results(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto group = ProcessGroupGloo::Create(store, rank, 2, options);
      ASSERT_TRUE(group.ok()) << group.status();
      Tensor t = Full({100}, static_cast<float>(rank + 1));
      if (rank == 0) {
        std::shared_ptr<Work> work = (*group)->AllReduce(t);
        const absl::Time start = absl::Now();
        const absl::Status status = work->Wait(absl::Milliseconds(100));
        EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
        EXPECT_LT(absl::Now() - start, absl::Seconds(5));
        short_wait_returned.Notify();
        ASSERT_TRUE(work->Wait(kGroupTimeout).ok());
      } else {
        ASSERT_TRUE(short_wait_returned.WaitForNotificationWithTimeout(kGroupTimeout));
        ASSERT_TRUE((*group)->AllReduce(t)->Wait(kGroupTimeout).ok());
      }
      results[rank] = t.ToVector<float>()[99];
      EXPECT_TRUE((*group)->Barrier()->Wait(kGroupTimeout).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(results[0], 3.0f);
  EXPECT_EQ(results[1], 3.0f);
}

}  // namespace
}  // namespace ddp
