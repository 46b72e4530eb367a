// The comm-hook API: a custom hook written here (docs/backends.md's example) runs without touching the
// Reducer, sees the buckets' parameter views and is_last, and ThenWork runs continuations as
// collectives complete.
#include "reducer/comm_hook.h"

#include <atomic>
#include <set>

#include "comm/async_work.h"
#include "gtest/gtest.h"
#include "reducer/reducer.h"
#include "reducer/reducer_test_util.h"
#include "testing/run_ranks.h"

namespace ddp {
namespace {

// ---- docs/backends.md's example ("Communication hooks"), compiled here ----
// Counts buckets and all-reduces each in float32; a continuation runs as the all-reduce completes.
class CountingHook : public CommHook {
 public:
  std::shared_ptr<Work> RunHook(ProcessGroup& group, GradBucket& bucket) override {
    ++launched;
    if (bucket.is_last) ++iterations;  // the hook keeps its own step counter
    bucket.bytes_sent = static_cast<int64_t>(bucket.buffer.nbytes());  // for the stats table
    std::shared_ptr<Work> sum = group.AllReduce(bucket.buffer, ReduceOp::kSum);
    return ThenWork("counting hook", sum, {[this]() -> absl::StatusOr<std::shared_ptr<Work>> {
                      ++reduced;  // bucket.buffer now holds the average
                      return std::shared_ptr<Work>();
                    }});
  }
  std::string name() const override { return "counting"; }

  std::atomic<int> launched{0}, reduced{0}, iterations{0};
};
// ---- end of docs/backends.md's example ----

// Records what the hook sees, then all-reduces plainly.
class RecordingHook : public AllReduceHook {
 public:
  std::shared_ptr<Work> RunHook(ProcessGroup& group, GradBucket& bucket) override {
    buckets.push_back(bucket);
    return AllReduceHook::RunHook(group, bucket);
  }
  std::vector<GradBucket> buckets;
};

TEST(CommHookTest, CustomHookAveragesLikeTheDefaultAndCountsItsCalls) {
  constexpr int kIterations = 3;
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    TinyModel model(5), reference(5);
    auto hook = std::make_shared<CountingHook>();
    ReducerOptions options;
    options.caps.bucket_cap_bytes = 64;
    options.caps.first_bucket_cap_bytes = 64;
    Reducer reducer(model.params, model.names, &group, ReducerOptions(options));
    reducer.SetCommHook(hook);
    Reducer plain(reference.params, reference.names, &group, options);
    int launched = 0;
    for (int it = 0; it < kIterations; ++it) {
      const Batch shard = Shard(GlobalBatch(it, 8), rank, 4);
      ASSERT_TRUE(RunIteration(reducer, model, shard).ok());
      ASSERT_TRUE(RunIteration(plain, reference, shard).ok());
      launched += static_cast<int>(reducer.bucket_assignment().size());
      for (size_t i = 0; i < model.params.size(); ++i) {
        EXPECT_EQ(model.params[i].grad().ToVector<float>(), reference.params[i].grad().ToVector<float>());
      }
      model.ZeroGrad();
      reference.ZeroGrad();
    }
    EXPECT_EQ(hook->launched.load(), launched);
    EXPECT_EQ(hook->reduced.load(), launched);
    EXPECT_EQ(hook->iterations.load(), kIterations);
    EXPECT_EQ(reducer.comm_hook().name(), "counting");
    // Bytes per step in the statistics: every bucket's float32 payload.
    int64_t total = 0;
    for (const Tensor& p : model.params) total += p.numel() * 4;
    ASSERT_EQ(reducer.stats().size(), static_cast<size_t>(kIterations));
    EXPECT_EQ(reducer.stats().back().bytes_sent, total);
  });
}

TEST(CommHookTest, BucketsShowParameterViewsAndTheLastBucket) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    TinyModel model(6);
    auto hook = std::make_shared<RecordingHook>();
    ReducerOptions options;
    options.caps.bucket_cap_bytes = 100;
    options.caps.first_bucket_cap_bytes = 100;
    options.comm_hook = hook;
    Reducer reducer(model.params, model.names, &group, options);
    ASSERT_TRUE(RunIteration(reducer, model, Shard(GlobalBatch(0, 8), rank, 4)).ok());
    const auto& assignment = reducer.bucket_assignment();
    ASSERT_EQ(hook->buckets.size(), assignment.size());
    ASSERT_GT(assignment.size(), 1u);
    std::set<size_t> seen;
    for (size_t b = 0; b < hook->buckets.size(); ++b) {
      const GradBucket& bucket = hook->buckets[b];
      EXPECT_EQ(bucket.index, static_cast<int>(b));
      EXPECT_EQ(bucket.is_last, b + 1 == assignment.size());
      ASSERT_EQ(bucket.parameters.size(), assignment[b].size());
      int64_t offset = 0;
      for (size_t k = 0; k < bucket.parameters.size(); ++k) {
        const GradBucketParameter& param = bucket.parameters[k];
        EXPECT_EQ(param.index, assignment[b][k]);
        EXPECT_EQ(param.name, model.names[param.index]);
        EXPECT_EQ(param.shape, model.params[param.index].shape());
        EXPECT_EQ(param.offset, offset);
        EXPECT_EQ(param.numel, model.params[param.index].numel());
        EXPECT_EQ(param.view.storage(), bucket.buffer.storage());
        EXPECT_EQ(param.view.storage_offset(), bucket.buffer.storage_offset() + offset);
        // After the iteration the view holds the averaged gradient the parameter received.
        EXPECT_EQ(param.view.ToVector<float>(), model.params[param.index].grad().ToVector<float>());
        offset += param.numel;
        seen.insert(param.index);
      }
      EXPECT_EQ(offset, bucket.buffer.numel());
    }
    EXPECT_EQ(seen.size(), model.params.size());
  });
}

TEST(CommHookTest, ThenWorkRunsContinuationsOnCompletionInOrder) {
  auto first = std::make_shared<AsyncWork>("first");
  auto second = std::make_shared<AsyncWork>("second");
  std::vector<int> order;
  std::shared_ptr<Work> chain = ThenWork("chain", first,
                                         {[&]() -> absl::StatusOr<std::shared_ptr<Work>> {
                                            order.push_back(1);
                                            return std::shared_ptr<Work>(second);
                                          },
                                          [&]() -> absl::StatusOr<std::shared_ptr<Work>> {
                                            order.push_back(2);
                                            return std::shared_ptr<Work>();
                                          }});
  EXPECT_FALSE(chain->IsCompleted());
  first->Complete(absl::OkStatus());  // the continuation runs here, not in Wait
  EXPECT_EQ(order, std::vector<int>({1}));
  EXPECT_FALSE(chain->IsCompleted());
  EXPECT_TRUE(absl::IsDeadlineExceeded(chain->Wait(absl::Milliseconds(5))));
  second->Complete(absl::OkStatus());
  EXPECT_EQ(order, std::vector<int>({1, 2}));
  EXPECT_TRUE(chain->IsCompleted());
  EXPECT_TRUE(chain->Wait(absl::Seconds(1)).ok());
}

TEST(CommHookTest, ThenWorkPropagatesTheFirstError) {
  auto first = std::make_shared<AsyncWork>("first");
  bool ran = false;
  std::shared_ptr<Work> chain = ThenWork("chain", first, {[&]() -> absl::StatusOr<std::shared_ptr<Work>> {
                                           ran = true;
                                           return std::shared_ptr<Work>();
                                         }});
  first->Complete(absl::UnavailableError("peer gone"));
  EXPECT_FALSE(ran);
  const absl::Status status = chain->Wait(absl::Seconds(1));
  EXPECT_TRUE(absl::IsUnavailable(status));
  EXPECT_NE(status.message().find("peer gone"), std::string::npos);
}

// A Work that cannot notify completion (as NCCL's): the chain runs its continuation in Wait.
class PlainWork : public Work {
 public:
  bool IsCompleted() override { return true; }
  absl::Status Wait(absl::Duration) override { return absl::OkStatus(); }
};

TEST(CommHookTest, ThenWorkFallsBackToWaitWithoutCallbacks) {
  bool ran = false;
  std::shared_ptr<Work> chain =
      ThenWork("chain", std::make_shared<PlainWork>(), {[&]() -> absl::StatusOr<std::shared_ptr<Work>> {
                 ran = true;
                 return std::shared_ptr<Work>();
               }});
  EXPECT_FALSE(ran);
  EXPECT_TRUE(chain->Wait(absl::Seconds(1)).ok());
  EXPECT_TRUE(ran);
}

TEST(CommHookTest, MakeCommHookKnowsTheBuiltIns) {
  for (const char* name : {"none", "allreduce", "fp16", "bf16", "powersgd"}) {
    EXPECT_TRUE(MakeCommHook(name).ok()) << name;
  }
  EXPECT_FALSE(MakeCommHook("int8").ok());
  PowerSgdOptions bad;
  bad.start_iter = 1;
  const absl::Status status = MakeCommHook("powersgd", bad).status();
  EXPECT_NE(status.message().find("start_iter"), std::string::npos) << status;
}

}  // namespace
}  // namespace ddp
