#include "launch/spawn.h"

#include <atomic>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "comm/memory_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

TEST(SpawnTest, RanksRendezvousThroughASharedMemoryStore) {
  MemoryStore store;
  absl::Status status = Spawn(4, [&](int rank) -> absl::Status {
    absl::Status s = store.Set(absl::StrCat("rank", rank), "here");
    if (!s.ok()) return s;
    return store.Wait({"rank0", "rank1", "rank2", "rank3"}, absl::Seconds(10));
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(SpawnTest, ReturnsTheFirstErrorNamedByRank) {
  absl::Status status = Spawn(3, [](int rank) -> absl::Status {
    if (rank == 2) return absl::InvalidArgumentError("bad shape");
    return absl::OkStatus();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "rank 2: bad shape");
}

TEST(SpawnTest, FirstErrorInTimeWins) {
  absl::Status status = Spawn(2, [](int rank) -> absl::Status {
    if (rank == 0) {
      absl::SleepFor(absl::Milliseconds(200));
      return absl::InternalError("late");
    }
    return absl::DeadlineExceededError("early");
  });
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("rank 1: early"));
}

TEST(SpawnTest, ExceptionsBecomeErrors) {
  absl::Status status = Spawn(2, [](int rank) -> absl::Status {
    if (rank == 1) throw std::runtime_error("boom");
    return absl::OkStatus();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("rank 1: uncaught exception: boom"));
}

}  // namespace
}  // namespace ddp
