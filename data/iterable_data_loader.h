// A multi-worker loader over an IterableDataset (torch's DataLoader with an IterableDataset): each of
// this rank's worker threads reads its own disjoint stream share (StreamShard) and prefetches batches
// into a bounded queue; batches are delivered round-robin over the workers (worker 0's first batch,
// worker 1's first, ..., worker 0's second, ...), skipping workers whose share ended, so the order is
// the same whatever the threads' timing.
#ifndef DDP_DATA_ITERABLE_DATA_LOADER_H_
#define DDP_DATA_ITERABLE_DATA_LOADER_H_

#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "data/iterable_dataset.h"

namespace ddp {

struct IterableDataLoaderOptions {
  int64_t batch_size = 1;                        // examples per batch (the last of a share may be short)
  int num_workers = 1;                           // worker threads of this rank, each one stream share
                                                 // (each runs kernels on one thread)
  int rank = 0;                                  // this rank, 0 <= rank < world_size
  int world_size = 1;                            // ranks reading the same dataset
  int prefetch_batches = 2;                      // bounded queue per worker
  absl::Duration timeout = absl::Minutes(5);     // Next() gives up waiting for a batch after this
};

// One pass over this rank's share of the dataset. Not thread-safe: one consumer thread calls Next().
// Destroying it mid-stream stops and joins the workers promptly.
class IterableDataLoader {
 public:
  // Opens every worker's stream and starts the workers. Errors: bad options, a stream that cannot open.
  // `dataset` must outlive the loader.
  static absl::StatusOr<std::unique_ptr<IterableDataLoader>> Create(const IterableDataset& dataset,
                                                                    const IterableDataLoaderOptions& options);
  ~IterableDataLoader();
  IterableDataLoader(const IterableDataLoader&) = delete;
  IterableDataLoader& operator=(const IterableDataLoader&) = delete;

  // The next batch, std::nullopt once every worker's share is exhausted, or the first worker error
  // (naming the worker and the record), or DeadlineExceeded after options.timeout.
  absl::StatusOr<std::optional<Example>> Next();

 private:
  struct WorkerQueue;
  explicit IterableDataLoader(IterableDataLoaderOptions options);
  void RunWorker(int worker, std::unique_ptr<ExampleStream> stream);

  IterableDataLoaderOptions options_;
  std::vector<std::unique_ptr<WorkerQueue>> queues_;
  std::vector<std::thread> threads_;
  int next_worker_ = 0;
};

}  // namespace ddp

#endif  // DDP_DATA_ITERABLE_DATA_LOADER_H_
