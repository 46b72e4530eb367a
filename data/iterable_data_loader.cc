#include "data/iterable_data_loader.h"

#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/check.h"
#include "tensor/threads.h"

namespace ddp {

// One worker's bounded queue of batches. `done` is set when its share ended or failed.
struct IterableDataLoader::WorkerQueue {
  absl::Mutex mu;
  std::deque<Example> batches ABSL_GUARDED_BY(mu);
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status error ABSL_GUARDED_BY(mu);
  bool stop ABSL_GUARDED_BY(mu) = false;  // the loader is being destroyed
};

IterableDataLoader::IterableDataLoader(IterableDataLoaderOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<IterableDataLoader>> IterableDataLoader::Create(
    const IterableDataset& dataset, const IterableDataLoaderOptions& options) {
  if (options.batch_size < 1 || options.num_workers < 1 || options.prefetch_batches < 1 || options.world_size < 1 ||
      options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "IterableDataLoader: need batch_size >= 1, num_workers >= 1, prefetch_batches >= 1 and 0 <= rank < "
        "world_size; got batch_size=", options.batch_size, " num_workers=", options.num_workers,
        " prefetch_batches=", options.prefetch_batches, " rank=", options.rank, " world_size=", options.world_size));
  }
  std::vector<std::unique_ptr<ExampleStream>> streams;
  for (int w = 0; w < options.num_workers; ++w) {
    DDP_ASSIGN_OR_RETURN(std::unique_ptr<ExampleStream> stream,
                         dataset.Open(StreamShard{options.rank, options.world_size, w, options.num_workers}));
    streams.push_back(std::move(stream));
  }
  std::unique_ptr<IterableDataLoader> loader(new IterableDataLoader(options));
  for (int w = 0; w < options.num_workers; ++w) loader->queues_.push_back(std::make_unique<WorkerQueue>());
  for (int w = 0; w < options.num_workers; ++w) {
    loader->threads_.emplace_back(&IterableDataLoader::RunWorker, loader.get(), w, std::move(streams[w]));
  }
  return loader;
}

IterableDataLoader::~IterableDataLoader() {
  for (auto& queue : queues_) {
    absl::MutexLock lock(&queue->mu);
    queue->stop = true;
  }
  for (std::thread& t : threads_) t.join();
}

void IterableDataLoader::RunWorker(int worker, std::unique_ptr<ExampleStream> stream) {
  SetNumThreads(1);  // kernels in a stream's Next run on this thread alone (PyTorch's workers alike)
  WorkerQueue& queue = *queues_[worker];
  while (true) {
    {
      absl::MutexLock lock(&queue.mu);
      const int capacity = options_.prefetch_batches;
      auto room = [&queue, capacity]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue.mu) -> bool {
        return queue.stop || static_cast<int>(queue.batches.size()) < capacity;
      };
      queue.mu.Await(absl::Condition(&room));
      if (queue.stop) return;
    }
    absl::StatusOr<std::optional<Example>> batch = NextStreamBatch(*stream, options_.batch_size);
    absl::MutexLock lock(&queue.mu);
    if (!batch.ok()) {
      queue.error = absl::Status(batch.status().code(),
                                 absl::StrCat("IterableDataLoader worker ", worker, ": ", batch.status().message()));
      queue.done = true;
      return;
    }
    if (!batch->has_value()) {
      queue.done = true;
      return;
    }
    queue.batches.push_back(std::move(**batch));
  }
}

absl::StatusOr<std::optional<Example>> IterableDataLoader::Next() {
  const int workers = static_cast<int>(queues_.size());
  for (int tried = 0; tried < workers; ++tried) {
    WorkerQueue& queue = *queues_[next_worker_];
    absl::MutexLock lock(&queue.mu);
    auto ready = [&queue]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue.mu) -> bool {
      return !queue.batches.empty() || queue.done;
    };
    if (!queue.mu.AwaitWithTimeout(absl::Condition(&ready), options_.timeout)) {
      return absl::DeadlineExceededError(absl::StrCat("IterableDataLoader: worker ", next_worker_,
                                                      " produced no batch within ",
                                                      absl::FormatDuration(options_.timeout)));
    }
    if (!queue.batches.empty()) {
      Example batch = std::move(queue.batches.front());
      queue.batches.pop_front();
      next_worker_ = (next_worker_ + 1) % workers;
      return std::optional<Example>(std::move(batch));
    }
    if (!queue.error.ok()) return queue.error;
    next_worker_ = (next_worker_ + 1) % workers;  // this worker's share ended: skip it
  }
  return std::optional<Example>();
}

}  // namespace ddp
