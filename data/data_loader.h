// DataLoader (torch.utils.data.DataLoader for map-style datasets): batches of a sampler's indices,
// collated into contiguous tensors by Dataset::GetBatch, loaded by background worker threads into a
// bounded window and delivered in sampler order whatever the number of workers.
//
//   DDP_ASSIGN_OR_RETURN(auto sampler, DistributedSampler::Create(train->Size(), {world, rank}));
//   DataLoaderOptions options;
//   options.batch_size = 64;
//   DDP_ASSIGN_OR_RETURN(auto loader, DataLoader::Create(train, std::move(sampler), options));
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     loader->sampler()->SetEpoch(epoch);
//     DDP_RETURN_IF_ERROR(loader->Begin());
//     while (true) {
//       DDP_ASSIGN_OR_RETURN(std::optional<Example> batch, loader->Next());
//       if (!batch) break;  // end of epoch
//       ...
//     }
//   }
#ifndef DDP_DATA_DATA_LOADER_H_
#define DDP_DATA_DATA_LOADER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace ddp {

// How a DataLoader batches and loads.
struct DataLoaderOptions {
  int64_t batch_size = 1;       // samples per batch (>= 1)
  bool shuffle = false;         // without a sampler: RandomSampler(seed) if true, else SequentialSampler
  uint64_t seed = 0;            // the RandomSampler's seed (shuffle without a sampler)
  bool drop_last = false;       // drop the epoch's last batch if it is short
  int num_workers = 0;          // background loading threads (0: Next() loads on the calling thread);
                                // each runs kernels on one thread, as PyTorch's workers do
  int prefetch_factor = 2;      // batches loaded ahead per worker (the bounded window is
                                // num_workers * prefetch_factor batches)
  absl::Duration timeout = absl::Minutes(5);  // longest Next() waits for one batch before failing
};

// Loads batches of `dataset` in the order of `sampler`. Not thread-safe: one thread calls Begin/Next
// (worker threads are internal). The dataset must be safe for concurrent reads (Dataset's contract).
//
// Errors: a batch that fails to load (in a worker or inline) is returned by Next() in its place, with
// the message naming the batch and the failing sample index; the epoch then ends (later Next() calls
// repeat the error) until the next Begin(). Destroying the loader or calling Begin() mid-epoch stops the
// workers and discards loaded batches; it never blocks longer than the batch each worker is loading.
class DataLoader {
 public:
  // `dataset` must not be null. `sampler` may be null: then options.shuffle picks RandomSampler or
  // SequentialSampler over the whole dataset. An error names a bad option.
  static absl::StatusOr<std::unique_ptr<DataLoader>> Create(std::shared_ptr<const Dataset> dataset,
                                                            std::unique_ptr<Sampler> sampler,
                                                            DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts an epoch from the sampler's current indices (call sampler()->SetEpoch or Restore first).
  // Stops an epoch in progress. Starts the workers when num_workers > 0.
  absl::Status Begin();
  // The next batch in sampler order; std::nullopt after the epoch's last batch; the failing batch's
  // error (naming the sample index), or DeadlineExceeded after options.timeout. REQUIRES: Begin() called.
  absl::StatusOr<std::optional<Example>> Next();

  // Batches in the current epoch (after Begin), or that the next Begin() would give.
  int64_t NumBatches() const;
  // Samples delivered by Next() since Begin() (for DistributedSampler::State).
  int64_t samples_delivered() const { return samples_delivered_; }
  // The sampler (owned by the loader; never null). Use it for SetEpoch / State / Restore between epochs.
  Sampler* sampler() const { return sampler_.get(); }
  const DataLoaderOptions& options() const { return options_; }

 private:
  DataLoader(std::shared_ptr<const Dataset> dataset, std::unique_ptr<Sampler> sampler, DataLoaderOptions options);
  // Loads batch `b`; an error names the batch and the failing sample index.
  absl::StatusOr<Example> LoadBatch(int64_t b) const;
  void WorkerLoop(int worker);
  void StopWorkers();
  // Returns batch `b` once a worker has put it into the window (or an error after the timeout).
  absl::StatusOr<Example> TakeFromWindow(int64_t b);

  std::shared_ptr<const Dataset> dataset_;
  std::unique_ptr<Sampler> sampler_;
  DataLoaderOptions options_;
  std::vector<std::vector<int64_t>> batches_;  // the current epoch's batches, fixed while workers run
  bool started_ = false;
  int64_t next_batch_ = 0;  // the batch Next() returns next (caller thread only)
  int64_t samples_delivered_ = 0;
  absl::Status epoch_error_;  // once set, Next() repeats it until Begin()
  std::vector<std::thread> workers_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_to_claim_ ABSL_GUARDED_BY(mu_) = 0;  // lowest batch no worker has claimed yet
  int64_t window_begin_ ABSL_GUARDED_BY(mu_) = 0;   // == next_batch_; workers stay below begin + window
  std::map<int64_t, absl::StatusOr<Example>> ready_ ABSL_GUARDED_BY(mu_);  // loaded, not yet delivered
};

}  // namespace ddp

#endif  // DDP_DATA_DATA_LOADER_H_
