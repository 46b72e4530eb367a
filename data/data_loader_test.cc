// DataLoader: sampler order whatever the worker count, batches that name their sample indices, a bounded prefetch window, clean shutdown
// mid-epoch, worker errors naming the sample index, timeouts.
#include "data/data_loader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "data/tensor_dataset.h"
#include "tensor/threads.h"

namespace ddp {
namespace {

// Example i is (input [2] = {i, -i}, target = i). Optionally slow (a per-sample delay that varies with
// the index, so workers finish out of order) and failing at one index.
class FakeDataset : public Dataset {
 public:
  FakeDataset(int64_t size, absl::Duration delay = absl::ZeroDuration(), int64_t fail_at = -1)
      : size_(size), delay_(delay), fail_at_(fail_at) {}
  int64_t Size() const override { return size_; }
  absl::StatusOr<Example> Get(int64_t index) const override {
    ++gets_;
    if (delay_ > absl::ZeroDuration()) absl::SleepFor(delay_ * ((index * 7919) % 5));
    if (index == fail_at_) return absl::DataLossError(absl::StrCat("corrupt record ", index));
    Example example{Tensor::Empty({2}), Tensor::Empty({}, DType::kInt64)};
    example.input.data<float>()[0] = static_cast<float>(index);
    example.input.data<float>()[1] = -static_cast<float>(index);
    example.target.data<int64_t>()[0] = index;
    return example;
  }
  int64_t gets() const { return gets_; }

 private:
  int64_t size_;
  absl::Duration delay_;
  int64_t fail_at_;
  mutable std::atomic<int64_t> gets_{0};
};

// Records the kernel thread count of every thread that loads a sample.
class ThreadCountDataset : public FakeDataset {
 public:
  explicit ThreadCountDataset(int64_t size) : FakeDataset(size) {}
  absl::StatusOr<Example> Get(int64_t index) const override {
    const int threads = GetNumThreads();
    if (threads != 1) other_than_one_.store(threads);
    return FakeDataset::Get(index);
  }
  int other_than_one() const { return other_than_one_.load(); }

 private:
  mutable std::atomic<int> other_than_one_{0};
};

std::unique_ptr<DataLoader> MakeLoader(std::shared_ptr<const Dataset> dataset, std::unique_ptr<Sampler> sampler,
                                       int64_t batch_size, int workers, bool drop_last = false) {
  DataLoaderOptions options;
  options.batch_size = batch_size;
  options.num_workers = workers;
  options.drop_last = drop_last;
  auto loader = DataLoader::Create(std::move(dataset), std::move(sampler), options);
  EXPECT_TRUE(loader.ok()) << loader.status();
  return std::move(loader).value();
}

// All targets of one epoch, batch by batch.
std::vector<std::vector<int64_t>> Drain(DataLoader& loader) {
  EXPECT_TRUE(loader.Begin().ok());
  std::vector<std::vector<int64_t>> batches;
  while (true) {
    auto batch = loader.Next();
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok() || !batch->has_value()) break;
    EXPECT_TRUE((*batch)->input.is_contiguous());
    std::vector<float> input = (*batch)->input.ToVector<float>();
    std::vector<int64_t> target = (*batch)->target.ToVector<int64_t>();
    for (size_t i = 0; i < target.size(); ++i) EXPECT_EQ(input[2 * i], static_cast<float>(target[i]));
    EXPECT_EQ((*batch)->indices, target) << "Example::indices names the rows' dataset indices";
    batches.push_back(target);
  }
  return batches;
}

TEST(DataLoaderTest, SamplerOrderWhateverTheWorkerCount) {
  auto dataset = std::make_shared<FakeDataset>(203, absl::Microseconds(20));
  RandomSampler reference(203, 5);
  reference.SetEpoch(3);
  const auto want = BatchIndices(reference.EpochIndices(), 8, false);
  for (int workers : {0, 1, 2, 3, 8}) {
    auto loader = MakeLoader(dataset, std::make_unique<RandomSampler>(203, 5), 8, workers);
    loader->sampler()->SetEpoch(3);
    EXPECT_EQ(loader->NumBatches(), 26);
    EXPECT_EQ(Drain(*loader), want) << workers << " workers";
    EXPECT_EQ(loader->samples_delivered(), 203);
    EXPECT_EQ(Drain(*loader), want) << "again, " << workers << " workers";
  }
  auto dropping = MakeLoader(dataset, nullptr, 8, 2, /*drop_last=*/true);
  EXPECT_EQ(Drain(*dropping).size(), 25u);
}

// Workers load with one kernel thread, whatever the process default (3 here, from BUILD) and the
// trainer's own count (2), as PyTorch's DataLoader workers call torch.set_num_threads(1).
TEST(DataLoaderTest, WorkersRunKernelsOnOneThread) {
  SetNumThreads(2);
  auto dataset = std::make_shared<ThreadCountDataset>(64);
  auto loader = MakeLoader(dataset, std::make_unique<SequentialSampler>(64), 8, 2);
  EXPECT_EQ(Drain(*loader).size(), 8u);
  EXPECT_EQ(dataset->other_than_one(), 0) << "a worker loaded with this many kernel threads";
  EXPECT_EQ(GetNumThreads(), 2) << "the trainer's count changed";
  int fresh_thread = 0;
  std::thread([&] { fresh_thread = GetNumThreads(); }).join();
  EXPECT_EQ(fresh_thread, 3) << "control: a thread of its own reads the process default";
}

TEST(DataLoaderTest, ShuffleWithoutSamplerAndDistributedSampler) {
  auto dataset = std::make_shared<FakeDataset>(50);
  DataLoaderOptions options;
  options.batch_size = 50;
  options.shuffle = true;
  options.seed = 4;
  auto loader = *DataLoader::Create(dataset, nullptr, options);
  EXPECT_EQ(Drain(*loader)[0], EpochPermutation(50, true, 4, 0));
  DistributedSamplerOptions sampler_options;
  sampler_options.num_replicas = 3;
  sampler_options.rank = 1;
  auto distributed = MakeLoader(dataset, *DistributedSampler::Create(50, sampler_options), 4, 2);
  distributed->sampler()->SetEpoch(2);
  std::vector<int64_t> got;
  for (const auto& batch : Drain(*distributed)) got.insert(got.end(), batch.begin(), batch.end());
  EXPECT_EQ(got, DistributedShard(50, sampler_options, 2));
}

// Waits up to 10 s for `dataset` to have served `gets` samples; returns how many it served.
int64_t AwaitGets(const FakeDataset& dataset, int64_t gets) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (dataset.gets() < gets && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  return dataset.gets();
}

// The loader prefetches (batches are loaded before Next asks for them) and the window bounds it: 2
// workers x prefetch_factor 2 = 4 batches ahead of the one Next returns next.
TEST(DataLoaderTest, PrefetchIsBounded) {
  auto dataset = std::make_shared<FakeDataset>(1000);
  DataLoaderOptions options;
  options.batch_size = 10;
  options.num_workers = 2;
  options.prefetch_factor = 2;
  auto loader = *DataLoader::Create(dataset, nullptr, options);
  ASSERT_TRUE(loader->Begin().ok());
  // Before any Next: the window of 4 batches fills, and stops there.
  EXPECT_EQ(AwaitGets(*dataset, 10 * 4), 10 * 4) << "the loader does not prefetch";
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(dataset->gets(), 10 * 4) << "prefetch beyond the window";
  // One batch delivered moves the window by one batch.
  ASSERT_TRUE(loader->Next().ok());
  EXPECT_EQ(AwaitGets(*dataset, 10 * (1 + 4)), 10 * (1 + 4)) << "the window does not move";
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(dataset->gets(), 10 * (1 + 4)) << "prefetch beyond the window";
}

TEST(DataLoaderTest, DestructionAndRestartMidEpochAreClean) {
  auto dataset = std::make_shared<FakeDataset>(10000, absl::Microseconds(200));
  for (int workers : {1, 4}) {
    auto loader = MakeLoader(dataset, nullptr, 16, workers);
    ASSERT_TRUE(loader->Begin().ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(loader->Next().ok());
    ASSERT_TRUE(loader->Begin().ok());  // restart mid-epoch: from the first batch again
    auto first = loader->Next();
    ASSERT_TRUE(first.ok() && first->has_value());
    EXPECT_EQ((*first)->target.ToVector<int64_t>()[0], 0);
    const absl::Time start = absl::Now();
    loader.reset();  // workers are mid-epoch with a full window
    EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  }
}

TEST(DataLoaderTest, WorkerErrorNamesTheSampleIndex) {
  auto dataset = std::make_shared<FakeDataset>(300, absl::ZeroDuration(), /*fail_at=*/137);
  for (int workers : {0, 1, 3}) {
    auto loader = MakeLoader(dataset, nullptr, 10, workers);
    ASSERT_TRUE(loader->Begin().ok());
    for (int b = 0; b < 13; ++b) {  // batches 0..12 (samples 0..129) arrive first, in order
      auto batch = loader->Next();
      ASSERT_TRUE(batch.ok() && batch->has_value()) << batch.status();
    }
    auto failed = loader->Next();
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(failed.status().message().find("batch 13, sample index 137: corrupt record 137"), std::string::npos)
        << failed.status();
    EXPECT_EQ(loader->Next().status(), failed.status());  // the epoch stays failed until Begin()
  }
  // An index outside the dataset (a sampler built for a bigger one) is named too.
  auto tensors = std::make_shared<TensorDataset>(Tensor::Empty({4, 2}), Tensor::Empty({4}, DType::kInt64));
  auto loader = MakeLoader(tensors, std::make_unique<SequentialSampler>(6), 3, 1);
  ASSERT_TRUE(loader->Begin().ok());
  ASSERT_TRUE(loader->Next().ok());
  auto failed = loader->Next();
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("sample index 4"), std::string::npos) << failed.status();
}

// Sample 1 is not ready until the test releases it (at most 30 s): the loader's wait cannot see it
// finish, however the machine schedules the two threads.
class GatedDataset : public FakeDataset {
 public:
  GatedDataset() : FakeDataset(8) {}
  absl::StatusOr<Example> Get(int64_t index) const override {
    if (index == 1) release_.WaitForNotificationWithTimeout(absl::Seconds(30));
    return FakeDataset::Get(index);
  }
  void Release() { release_.Notify(); }

 private:
  mutable absl::Notification release_;
};

TEST(DataLoaderTest, SlowWorkerTimesOutWithAClearError) {
  auto dataset = std::make_shared<GatedDataset>();
  DataLoaderOptions options;
  options.batch_size = 2;
  options.num_workers = 1;
  options.timeout = absl::Milliseconds(50);
  auto loader = *DataLoader::Create(dataset, nullptr, options);
  ASSERT_TRUE(loader->Begin().ok());
  auto batch = loader->Next();
  dataset->Release();
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(batch.status().message().find("batch 0 not loaded within 50ms"), std::string::npos) << batch.status();
}

TEST(DataLoaderTest, BadOptionsAreErrors) {
  auto dataset = std::make_shared<FakeDataset>(8);
  DataLoaderOptions options;
  options.batch_size = 0;
  EXPECT_NE(DataLoader::Create(dataset, nullptr, options).status().message().find("batch_size must be >= 1"),
            std::string::npos);
  options = DataLoaderOptions();
  options.num_workers = -1;
  EXPECT_FALSE(DataLoader::Create(dataset, nullptr, options).ok());
  EXPECT_FALSE(DataLoader::Create(nullptr, nullptr, DataLoaderOptions()).ok());
  auto loader = *DataLoader::Create(dataset, nullptr, DataLoaderOptions());
  EXPECT_EQ(loader->Next().status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ddp
