// A regrouped generation's failure reports find the launcher's notice of a lost member under its new rank.
#include "comm/generation_store.h"

#include <gtest/gtest.h>

#include "store/memory_store.h"
#include "store/store_keys.h"

namespace ddp {
namespace {

TEST(GenerationStoreTest, ExitNoticesAreReadUnderLaunchRanksAndTheRestUnderThePrefix) {
  MemoryStore base;
  ASSERT_TRUE(base.Set(LauncherExitNoticeKey(2), "exit code 137 (signal 9)").ok());
  GenerationStore store("elastic/gen1/pg", &base, {0, 2});  // launch rank 2 is rank 1 here
  const absl::StatusOr<std::string> notice = store.Get(LauncherExitNoticeKey(1), absl::ZeroDuration());
  ASSERT_TRUE(notice.ok()) << notice.status();
  EXPECT_EQ(*notice, "exit code 137 (signal 9)");
  EXPECT_FALSE(store.Get(LauncherExitNoticeKey(0), absl::ZeroDuration()).ok());  // launch rank 0 did not exit
  ASSERT_TRUE(store.Set("x", "1").ok());
  const absl::StatusOr<std::string> prefixed = base.Get("elastic/gen1/pg/x", absl::ZeroDuration());
  ASSERT_TRUE(prefixed.ok()) << prefixed.status();
  EXPECT_EQ(*prefixed, "1");
  // A rank outside the generation is an ordinary key of the namespace.
  ASSERT_TRUE(store.Set(LauncherExitNoticeKey(5), "other").ok());
  EXPECT_EQ(*store.Get(LauncherExitNoticeKey(5), absl::ZeroDuration()), "other");
}

}  // namespace
}  // namespace ddp
