// Gloo rendezvous (connectFullMesh) through our MemoryStore, then an all-reduce over Gloo's TCP
// transport on loopback; and errors surfacing as exceptions.
#include "comm/gloo/gloo_store_adapter.h"

#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "store/memory_store.h"
#include "gloo/allreduce.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

TEST(GlooStoreAdapterTest, GlooRendezvousesAndAllReducesThroughOurStore) {
  constexpr int kWorld = 3;
  MemoryStore store;
  std::vector<float> results(kWorld, 0.0f);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.emplace_back([&, rank] {
      GlooStoreAdapter adapter(&store, absl::Seconds(20));
      gloo::rendezvous::PrefixStore prefixed("pg0", adapter);
      gloo::transport::tcp::attr attr("127.0.0.1");
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, kWorld);
      context->setTimeout(std::chrono::seconds(20));
      context->connectFullMesh(prefixed, device);
      float value = static_cast<float>(rank + 1);
      gloo::AllreduceOptions options(context);
      options.setOutput(&value, 1);
      options.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      gloo::allreduce(options);
      results[rank] = value;
    });
  }
  for (std::thread& t : ranks) t.join();
  for (float v : results) EXPECT_EQ(v, 6.0f);
}

TEST(GlooStoreAdapterTest, SetAndGetCopyBytes) {
  MemoryStore store;
  GlooStoreAdapter adapter(&store, absl::Seconds(1));
  adapter.set("k", {'a', '\0', 'b'});
  EXPECT_EQ(adapter.get("k"), (std::vector<char>{'a', '\0', 'b'}));
  EXPECT_EQ(*store.Get("k", absl::Seconds(1)), std::string("a\0b", 3));
}

TEST(GlooStoreAdapterTest, TimeoutsThrowWithTheKeyInTheMessage) {
  MemoryStore store;
  GlooStoreAdapter adapter(&store, absl::Milliseconds(50));
  try {
    adapter.wait({"rank_7_address"}, std::chrono::milliseconds(50));
    FAIL() << "wait did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("rank_7_address"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("DEADLINE_EXCEEDED"));
  }
  EXPECT_THROW(adapter.get("missing"), std::runtime_error);  // Uses the default timeout.
}

}  // namespace
}  // namespace ddp
