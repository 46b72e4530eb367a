#include "comm/host_identity.h"

#include <thread>

#include "store/memory_store.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

TEST(HostIdentityTest, NamesThisHostAndBoot) {
  const std::string id = LocalHostIdentity();
  EXPECT_EQ(id, LocalHostIdentity());
  EXPECT_NE(id.find(' '), std::string::npos) << id;
  EXPECT_GT(id.size(), 30u) << id;  // a boot id is 36 characters
}

TEST(HostIdentityTest, AllOnOneHost) {
  EXPECT_TRUE(AllOnOneHost({}));
  EXPECT_TRUE(AllOnOneHost({"a 1", "a 1", "a 1"}));
  EXPECT_FALSE(AllOnOneHost({"a 1", "a 1", "b 1"}));
  EXPECT_FALSE(AllOnOneHost({"a 1", "a 2"}));  // same name, another machine (or boot)
}

TEST(HostIdentityTest, ExchangeThroughTheStore) {
  MemoryStore store;
  std::vector<std::string> seen[2];
  std::thread peer([&] { seen[1] = *ExchangeHostIdentities(store, 1, 2, "b 2", absl::Seconds(10)); });
  seen[0] = *ExchangeHostIdentities(store, 0, 2, "a 1", absl::Seconds(10));
  peer.join();
  const std::vector<std::string> expected = {"a 1", "b 2"};
  EXPECT_EQ(seen[0], expected);
  EXPECT_EQ(seen[1], expected);
  absl::StatusOr<std::vector<std::string>> alone = ExchangeHostIdentities(store, 0, 3, "a 1", absl::Milliseconds(50));
  ASSERT_FALSE(alone.ok());
  EXPECT_NE(alone.status().message().find("rank 2 never published its host"), std::string::npos) << alone.status();
}

}  // namespace
}  // namespace ddp
