// Every Store operation, run on each implementation (memory, file, TCP, prefix) through one
// parameterised suite.
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "store/file_store.h"
#include "store/memory_store.h"
#include "store/prefix_store.h"
#include "store/store.h"
#include "store/tcp_store_client.h"
#include "store/tcp_store_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

// One store under test: Connect() gives another handle on the same data (a new client or file
// handle where the backend has such a thing), as another rank would have.
class StoreHarness {
 public:
  virtual ~StoreHarness() = default;
  virtual std::shared_ptr<Store> Connect() = 0;
};

class MemoryHarness : public StoreHarness {
 public:
  std::shared_ptr<Store> Connect() override { return store_; }

 private:
  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
};

class FileHarness : public StoreHarness {
 public:
  FileHarness() {
    static std::atomic<int> counter{0};
    path_ = absl::StrCat(::testing::TempDir(), "/store_test_", ::getpid(), "_", counter++);
    ::unlink(path_.c_str());
  }
  ~FileHarness() override { ::unlink(path_.c_str()); }
  std::shared_ptr<Store> Connect() override {
    auto store = FileStore::Create(path_);
    EXPECT_TRUE(store.ok()) << store.status();
    return std::move(*store);
  }

 private:
  std::string path_;
};

class TcpHarness : public StoreHarness {
 public:
  TcpHarness() {
    TcpStoreServerOptions options;
    options.host = "127.0.0.1";
    options.job_token = "secret";
    auto server = TcpStoreServer::Create(options);
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  std::shared_ptr<Store> Connect() override {
    TcpStoreClientOptions options;
    options.port = server_->port();
    options.job_token = "secret";
    options.connect_timeout = absl::Seconds(5);
    auto client = TcpStoreClient::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(*client);
  }

 private:
  std::unique_ptr<TcpStoreServer> server_;
};

class PrefixHarness : public StoreHarness {
 public:
  std::shared_ptr<Store> Connect() override {
    return std::make_shared<PrefixStore>("group0", &base_);
  }

 private:
  MemoryStore base_;
};

struct Backend {
  std::string name;
  std::function<std::unique_ptr<StoreHarness>()> make;
};

class StoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    harness_ = GetParam().make();
    store_ = harness_->Connect();
    ASSERT_NE(store_, nullptr);
  }
  std::unique_ptr<StoreHarness> harness_;
  std::shared_ptr<Store> store_;
};

constexpr absl::Duration kTimeout = absl::Seconds(10);

TEST_P(StoreTest, SetThenGetReturnsLatestValue) {
  ASSERT_TRUE(store_->Set("k", "v1").ok());
  ASSERT_TRUE(store_->Set("k", "v2").ok());
  EXPECT_EQ(*store_->Get("k", kTimeout), "v2");
}

TEST_P(StoreTest, ValuesAreBytes) {
  const std::string binary("a\0b\xff\n", 5);
  ASSERT_TRUE(store_->Set(binary, binary).ok());
  ASSERT_TRUE(store_->Set("empty", "").ok());
  EXPECT_EQ(*store_->Get(binary, kTimeout), binary);
  EXPECT_EQ(*store_->Get("empty", kTimeout), "");
}

TEST_P(StoreTest, GetTimesOutNamingTheKey) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> value = store_->Get("never_set", absl::Milliseconds(100));
  const absl::Duration elapsed = absl::Now() - start;
  ASSERT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(value.status().message(), HasSubstr("never_set"));
  EXPECT_GE(elapsed, absl::Milliseconds(95));
  EXPECT_LT(elapsed, absl::Seconds(5));
}

TEST_P(StoreTest, WaitTimesOutNamingOnlyTheMissingKeys) {
  ASSERT_TRUE(store_->Set("present", "1").ok());
  absl::Status status = store_->Wait({"present", "absent"}, absl::Milliseconds(100));
  ASSERT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("absent"));
  EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("present")));
  EXPECT_TRUE(store_->Wait({"present"}, absl::Milliseconds(100)).ok());
  EXPECT_TRUE(store_->Wait({}, absl::Milliseconds(100)).ok());
}

TEST_P(StoreTest, GetAndWaitBlockUntilAnotherRankSets) {
  std::shared_ptr<Store> other = harness_->Connect();
  std::thread setter([other] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(other->Set("late", "here").ok());
    absl::SleepFor(absl::Milliseconds(20));
    ASSERT_TRUE(other->Add("late_counter", 1).ok());
  });
  EXPECT_EQ(*store_->Get("late", kTimeout), "here");
  EXPECT_TRUE(store_->Wait({"late", "late_counter"}, kTimeout).ok());
  setter.join();
}

TEST_P(StoreTest, AddCountsFromZeroAndStoresDecimalText) {
  EXPECT_EQ(*store_->Add("n", 5), 5);
  EXPECT_EQ(*store_->Add("n", -2), 3);
  EXPECT_EQ(*store_->Add("n", 0), 3);
  EXPECT_EQ(*store_->Get("n", kTimeout), "3");
  ASSERT_TRUE(store_->Set("text", "abc").ok());
  EXPECT_EQ(store_->Add("text", 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreTest, CompareSetFollowsPyTorchSemantics) {
  // Missing key, empty expected: set.
  EXPECT_EQ(*store_->CompareSet("c", "", "first"), "first");
  // Matching expected: swap.
  EXPECT_EQ(*store_->CompareSet("c", "first", "second"), "second");
  // Wrong expected: current value, unchanged.
  EXPECT_EQ(*store_->CompareSet("c", "first", "third"), "second");
  EXPECT_EQ(*store_->Get("c", kTimeout), "second");
  // Missing key, non-empty expected: returns expected, sets nothing.
  EXPECT_EQ(*store_->CompareSet("missing", "x", "y"), "x");
  EXPECT_EQ(store_->Get("missing", absl::Milliseconds(10)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_P(StoreTest, DeleteKeyAndNumKeys) {
  const int64_t before = *store_->NumKeys();
  ASSERT_TRUE(store_->Set("a", "1").ok());
  ASSERT_TRUE(store_->Set("b", "2").ok());
  EXPECT_EQ(*store_->NumKeys(), before + 2);
  EXPECT_TRUE(*store_->DeleteKey("a"));
  EXPECT_FALSE(*store_->DeleteKey("a"));
  EXPECT_EQ(*store_->NumKeys(), before + 1);
  EXPECT_EQ(store_->Get("a", absl::Milliseconds(10)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_P(StoreTest, ConcurrentAddsFromManyRanksAreAtomic) {
  constexpr int kRanks = 4;
  constexpr int kAddsPerRank = 50;
  std::vector<std::shared_ptr<Store>> handles;
  for (int r = 0; r < kRanks; ++r) handles.push_back(harness_->Connect());
  std::vector<std::vector<int64_t>> seen(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      for (int i = 0; i < kAddsPerRank; ++i) {
        absl::StatusOr<int64_t> v = handles[r]->Add("counter", 1);
        ASSERT_TRUE(v.ok()) << v.status();
        seen[r].push_back(*v);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::set<int64_t> all;
  for (const auto& s : seen) all.insert(s.begin(), s.end());
  EXPECT_EQ(all.size(), kRanks * kAddsPerRank);  // Every Add saw a distinct value.
  EXPECT_EQ(*store_->Get("counter", kTimeout), absl::StrCat(kRanks * kAddsPerRank));
}

TEST_P(StoreTest, BarrierPatternWithAddAndWait) {
  constexpr int kRanks = 3;
  std::vector<std::thread> threads;
  std::atomic<int> passed{0};
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, handle = harness_->Connect()] {
      absl::StatusOr<int64_t> arrived = handle->Add("barrier/arrived", 1);
      ASSERT_TRUE(arrived.ok());
      if (*arrived == kRanks) {
        ASSERT_TRUE(handle->Set("barrier/done", "1").ok());
      }
      ASSERT_TRUE(handle->Wait({"barrier/done"}, kTimeout).ok());
      ++passed;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(passed.load(), kRanks);
}

INSTANTIATE_TEST_SUITE_P(
    AllStores, StoreTest,
    ::testing::Values(Backend{"Memory", [] { return std::make_unique<MemoryHarness>(); }},
                      Backend{"File", [] { return std::make_unique<FileHarness>(); }},
                      Backend{"Tcp", [] { return std::make_unique<TcpHarness>(); }},
                      Backend{"Prefix", [] { return std::make_unique<PrefixHarness>(); }}),
    [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });

TEST(PrefixStoreTest, KeysLiveUnderThePrefixInTheBaseStore) {
  MemoryStore base;
  PrefixStore a("a", &base);
  PrefixStore b("b", &base);
  ASSERT_TRUE(a.Set("k", "from a").ok());
  ASSERT_TRUE(b.Set("k", "from b").ok());
  EXPECT_EQ(*base.Get("a/k", kTimeout), "from a");
  EXPECT_EQ(*b.Get("k", kTimeout), "from b");
  absl::Status status = a.Wait({"nope"}, absl::Milliseconds(10));
  EXPECT_THAT(status.message(), HasSubstr("a/nope"));
}

}  // namespace
}  // namespace ddp
