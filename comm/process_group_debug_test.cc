#include "comm/process_group_debug.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

#include "comm/init.h"
#include "gmock/gmock.h"
#include "tensor/factory.h"
#include "testing/run_ranks.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

TEST(ProcessGroupDebugTest, ParsesTheMode) {
  EXPECT_EQ(ParseDebugMode(nullptr).value(), DebugMode::kOff);
  EXPECT_EQ(ParseDebugMode("OFF").value(), DebugMode::kOff);
  EXPECT_EQ(ParseDebugMode("Detail").value(), DebugMode::kDetail);
  const absl::Status bad = ParseDebugMode("verbose").status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad));
  EXPECT_THAT(std::string(bad.message()), HasSubstr("DDP_DEBUG=verbose"));
}

// InitProcessGroup wraps its group when DDP_DEBUG=detail and refuses an unknown mode by name.
TEST(ProcessGroupDebugTest, InitProcessGroupReadsDdpDebug) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  for (const std::string mode : {"detail", "off", "verbose"}) {
    InitOptions options;
    options.init_method = absl::StrCat("file://", tmp ? tmp : "/tmp", "/debug_init_", mode, "_", getpid());
    options.rank = 0;
    options.world_size = 1;
    options.env = [mode](const std::string& name) -> std::optional<std::string> {
      if (name == "DDP_DEBUG") return mode;
      return std::nullopt;
    };
    auto context = InitProcessGroup(options);
    if (mode == "verbose") {
      EXPECT_THAT(std::string(context.status().message()), HasSubstr("DDP_DEBUG=verbose is not a debug mode"));
      continue;
    }
    ASSERT_TRUE(context.ok()) << context.status();
    EXPECT_EQ(dynamic_cast<ProcessGroupDebug*>((*context)->group.get()) != nullptr, mode == "detail") << mode;
    Tensor t = Ones({3});
    EXPECT_TRUE((*context)->group->AllReduce(t)->Wait(absl::Seconds(10)).ok());
  }
}

// Matching calls pass through and give the wrapped group's results.
TEST(ProcessGroupDebugTest, MatchingCallsGiveTheWrappedResults) {
  RunRanks(3, [](int rank, ProcessGroup& gloo) {
    ProcessGroupDebug group(&gloo);
    Tensor t = Full({5}, static_cast<float>(rank + 1));
    ASSERT_TRUE(group.AllReduce(t)->Wait(absl::Seconds(30)).ok());
    EXPECT_EQ(t.ToVector<float>(), std::vector<float>(5, 6.0f));
    ASSERT_TRUE(group.Broadcast(t, 2)->Wait(absl::Seconds(30)).ok());
    ASSERT_TRUE(group.Barrier()->Wait(absl::Seconds(30)).ok());
    std::string data = rank == 1 ? "from one" : "";
    ASSERT_TRUE(group.BroadcastObject(&data, 1).ok());
    EXPECT_EQ(data, "from one");
  });
}

// Element counts differ (the different-bucket-cap mistake): both ranks fail at the same call, naming
// both ranks and both calls, and nothing mismatched reaches Gloo.
TEST(ProcessGroupDebugTest, MismatchedCountsNameBothRanksAndCalls) {
  RunRanks(2, [](int rank, ProcessGroup& gloo) {
    ProcessGroupDebug group(&gloo);
    Tensor same = Ones({4});
    ASSERT_TRUE(group.AllReduce(same)->Wait(absl::Seconds(30)).ok());
    Tensor t = Ones({rank == 0 ? 535820 : 3});
    const absl::Status status = group.AllReduce(t, ReduceOp::kSum)->Wait(absl::Seconds(30));
    EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("collective mismatch at call #2: rank 0 calls #2 AllReduce(sum) of 535820 float32, "
                          "rank 1 calls #2 AllReduce(sum) of 3 float32"));
    // The group still works: the mismatched call was never issued.
    ASSERT_TRUE(group.AllReduce(same)->Wait(absl::Seconds(30)).ok());
  });
}

TEST(ProcessGroupDebugTest, DifferentOperationsAndRootsAreNamed) {
  RunRanks(2, [](int rank, ProcessGroup& gloo) {
    ProcessGroupDebug group(&gloo);
    Tensor t = Ones({8});
    const absl::Status status = rank == 0 ? group.Broadcast(t, 0)->Wait(absl::Seconds(30))
                                          : group.AllReduce(t, ReduceOp::kMax)->Wait(absl::Seconds(30));
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("rank 0 calls #1 Broadcast(root 0) of 8 float32, rank 1 calls #1 AllReduce(max) of 8 float32"));
    const absl::Status roots = group.Broadcast(t, rank)->Wait(absl::Seconds(30));
    EXPECT_THAT(std::string(roots.message()), HasSubstr("Broadcast(root 0) of 8 float32, rank 1 calls #2 Broadcast(root 1)"));
  });
}

}  // namespace
}  // namespace ddp
