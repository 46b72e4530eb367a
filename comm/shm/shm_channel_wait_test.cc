// Note [Spinning while the process waits] and Note [Spinning under contention] (comm/shm/shm_channel.cc):
// a channel's wait spins past options.spin only while a thread of its process is blocked on the group
// (ShmWaiters) and the CPUs are not oversubscribed, a wait asleep on its futex is woken to spin when such
// a thread arrives, and oversubscribed groups never spin long. Ranks are threads of this process, each
// with its own ShmChannel over one MemoryStore; the CPUs' contention is a fake whose runnable count the
// tests set (the machine's own load must not decide them).
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "store/memory_store.h"
#include "comm/shm/shm_channel.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

// The runnable threads the fake contention below reports, on kFakeCpus CPUs: kFakeCpus means quiet.
constexpr int kFakeCpus = 2;
std::atomic<int> fake_runnable{kFakeCpus};

// Samples fake_runnable at every clock read of a spinning wait.
CpuContention& FakeContention() {
  static CpuContention* const contention = new CpuContention(
      kFakeCpus, []() -> std::optional<int> { return fake_runnable.load(); },
      CpuContention::Options{absl::ZeroDuration()});
  return *contention;
}

// Brings the fake contention's verdict to `runnable` threads wanting kFakeCpus CPUs.
void SetRunnable(int runnable) {
  fake_runnable = runnable;
  for (int i = 0; i < 4; ++i) FakeContention().Sample(absl::Now());
}

// Long enough that no test below reaches it: a wait that spins long spins until its peer posts, and a
// sleeping wait wakes only for a Post or for ShmWaiters::Begin.
ShmChannelOptions TestOptions() {
  ShmChannelOptions options;
  options.contention = &FakeContention();
  options.slot_bytes = 4096;
  options.spin = absl::Microseconds(30);
  options.spin_while_waited = absl::Seconds(20);
  options.liveness_interval = absl::Seconds(20);
  options.name_tag = "ddp-shm-wait-test";
  return options;
}

// `world` channels created concurrently (Create waits until every rank has mapped every segment).
std::vector<std::unique_ptr<ShmChannel>> CreateChannels(int world) {
  SetRunnable(kFakeCpus);
  MemoryStore store;
  std::vector<std::unique_ptr<ShmChannel>> channels(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      auto channel = ShmChannel::Create(store, rank, world, TestOptions());
      ASSERT_TRUE(channel.ok()) << channel.status();
      channels[rank] = *std::move(channel);
    });
  }
  for (std::thread& t : threads) t.join();
  return channels;
}

std::string What() { return "test wait"; }

// Rank 0 waits for every other rank's kReady of step 1, which they post after `delay`.
absl::Status WaitForLatePeers(std::vector<std::unique_ptr<ShmChannel>>& channels, absl::Duration delay) {
  std::vector<std::thread> posters;
  for (size_t q = 1; q < channels.size(); ++q) {
    posters.emplace_back([&, q] {
      absl::SleepFor(delay);
      channels[q]->Post(ShmWord::kReady, 1);
    });
  }
  absl::Status status = channels[0]->WaitAll(ShmWord::kReady, 1, absl::Now() + absl::Seconds(60), What);
  for (std::thread& t : posters) t.join();
  return status;
}

// Polls `done` for up to 10 s.
template <typename Condition>
bool Eventually(Condition done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Microseconds(200));
  }
  return true;
}

TEST(ShmChannelWaitTest, AWaitWithNoThreadBlockedOnTheGroupSleeps) {
  auto channels = CreateChannels(2);
  ASSERT_TRUE(WaitForLatePeers(channels, absl::Milliseconds(50)).ok());
  EXPECT_GE(channels[0]->sleeps(), 1u);
  EXPECT_EQ(channels[0]->long_spins(), 0u);
}

TEST(ShmChannelWaitTest, AWaitWhileAThreadIsBlockedOnTheGroupSpinsInsteadOfSleeping) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "one CPU: two ranks oversubscribe it";
  auto channels = CreateChannels(2);
  channels[0]->waiters()->Begin();
  ASSERT_TRUE(WaitForLatePeers(channels, absl::Milliseconds(50)).ok());
  channels[0]->waiters()->End();
  EXPECT_EQ(channels[0]->sleeps(), 0u);
  EXPECT_EQ(channels[0]->long_spins(), 1u);
}

TEST(ShmChannelWaitTest, ASleepingWaitIsWokenToSpinWhenAThreadBlocksOnTheGroup) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "one CPU: two ranks oversubscribe it";
  auto channels = CreateChannels(2);
  absl::Status status;
  std::thread waiter([&] {
    status = channels[0]->Wait(1, ShmWord::kReady, 1, absl::Now() + absl::Seconds(60), What);
  });
  ASSERT_TRUE(Eventually([&] { return channels[0]->sleeps() >= 1; }));
  channels[0]->waiters()->Begin();
  // Without the wake-up the wait would sleep until the Post below (the liveness interval is 20 s).
  const bool spun = Eventually([&] { return channels[0]->long_spins() == 1; });
  channels[1]->Post(ShmWord::kReady, 1);
  waiter.join();
  channels[0]->waiters()->End();
  EXPECT_TRUE(spun) << "the sleeping wait was not woken to spin";
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(channels[0]->sleeps(), 1u);
}

TEST(ShmChannelWaitTest, AGroupWithMoreRanksThanCpusNeverSpinsLong) {
  const int world = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)) + 1;
  if (world > 9) GTEST_SKIP() << "more than 8 CPUs: " << world << " ranks would make a slow test";
  auto channels = CreateChannels(world);
  channels[0]->waiters()->Begin();
  ASSERT_TRUE(WaitForLatePeers(channels, absl::Milliseconds(50)).ok());
  channels[0]->waiters()->End();
  EXPECT_GE(channels[0]->sleeps(), 1u);
  EXPECT_EQ(channels[0]->long_spins(), 0u);
}

TEST(ShmChannelWaitTest, AWaitWhileTheCpusAreOversubscribedSleepsAfterAShortSpinThoughAThreadIsBlocked) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "one CPU: two ranks oversubscribe it";
  auto channels = CreateChannels(2);
  SetRunnable(kFakeCpus + 1);  // one thread more than CPUs: the peer may be the one without a CPU
  channels[0]->waiters()->Begin();
  ASSERT_TRUE(WaitForLatePeers(channels, absl::Milliseconds(50)).ok());
  channels[0]->waiters()->End();
  EXPECT_GE(channels[0]->sleeps(), 1u);
  EXPECT_EQ(channels[0]->long_spins(), 0u);
}

TEST(ShmChannelWaitTest, AWaitThatSeesTheCpusOversubscribedWhileItSpinsStopsSpinning) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "one CPU: two ranks oversubscribe it";
  auto channels = CreateChannels(2);
  channels[0]->waiters()->Begin();
  absl::Status status;
  std::thread waiter([&] {
    status = channels[0]->Wait(1, ShmWord::kReady, 1, absl::Now() + absl::Seconds(60), What);
  });
  ASSERT_TRUE(Eventually([&] { return channels[0]->long_spins() == 1; }));  // quiet: it spins long
  SetRunnable(kFakeCpus + 1);  // its next sample finds another thread wanting the CPUs
  // Without the sample the wait would spin until the Post below (spin_while_waited is 20 s).
  const bool slept = Eventually([&] { return channels[0]->sleeps() >= 1; });
  channels[1]->Post(ShmWord::kReady, 1);
  waiter.join();
  channels[0]->waiters()->End();
  EXPECT_TRUE(slept) << "the wait kept spinning on oversubscribed CPUs";
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace ddp
