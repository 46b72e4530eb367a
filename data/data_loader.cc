// Note [Ordered prefetch window]
// Workers claim batch numbers from one counter (next_to_claim_) in increasing order, but only below
// window_begin_ + window, where window_begin_ is the batch the training loop takes next. A loaded batch
// goes into ready_ under its number; Next() waits for exactly its number. So batches come out in sampler
// order whatever the worker count or timing, and at most `window` batches are claimed or loaded ahead
// (the bounded prefetch queue). Stopping sets stopping_ and joins the workers; a worker checks it before
// every claim, so a stop waits at most for the batches being loaded at that moment.
#include "data/data_loader.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "tensor/threads.h"

namespace ddp {
namespace {

// A worker with nothing to do re-checks its condition at least this often (a bounded wait, although
// every state change it waits for also wakes it at once).
constexpr absl::Duration kWorkerPoll = absl::Milliseconds(200);

absl::Status ValidateOptions(const Dataset* dataset, const DataLoaderOptions& options) {
  if (dataset == nullptr) return absl::InvalidArgumentError("DataLoader: dataset is null");
  if (options.batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("DataLoader: batch_size must be >= 1, got ", options.batch_size));
  }
  if (options.num_workers < 0) {
    return absl::InvalidArgumentError(absl::StrCat("DataLoader: num_workers must be >= 0, got ", options.num_workers));
  }
  if (options.prefetch_factor < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoader: prefetch_factor must be >= 1, got ", options.prefetch_factor));
  }
  if (options.timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("DataLoader: timeout must be > 0");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::Create(std::shared_ptr<const Dataset> dataset,
                                                               std::unique_ptr<Sampler> sampler,
                                                               DataLoaderOptions options) {
  DDP_RETURN_IF_ERROR(ValidateOptions(dataset.get(), options));
  if (sampler == nullptr) {
    if (options.shuffle) {
      sampler = std::make_unique<RandomSampler>(dataset->Size(), options.seed);
    } else {
      sampler = std::make_unique<SequentialSampler>(dataset->Size());
    }
  }
  return std::unique_ptr<DataLoader>(new DataLoader(std::move(dataset), std::move(sampler), options));
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, std::unique_ptr<Sampler> sampler,
                       DataLoaderOptions options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options) {}

DataLoader::~DataLoader() { StopWorkers(); }

int64_t DataLoader::NumBatches() const {
  if (started_) return static_cast<int64_t>(batches_.size());
  const int64_t n = sampler_->Length();
  return options_.drop_last ? n / options_.batch_size : (n + options_.batch_size - 1) / options_.batch_size;
}

absl::Status DataLoader::Begin() {
  StopWorkers();
  batches_ = BatchIndices(sampler_->EpochIndices(), options_.batch_size, options_.drop_last);
  started_ = true;
  next_batch_ = 0;
  samples_delivered_ = 0;
  epoch_error_ = absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = false;
    next_to_claim_ = 0;
    window_begin_ = 0;
    ready_.clear();
  }
  const int workers = std::min<int64_t>(options_.num_workers, static_cast<int64_t>(batches_.size()));
  for (int w = 0; w < workers; ++w) workers_.emplace_back([this, w] { WorkerLoop(w); });
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Example>> DataLoader::Next() {
  if (!started_) return absl::FailedPreconditionError("DataLoader::Next before Begin");
  if (!epoch_error_.ok()) return epoch_error_;
  if (next_batch_ >= static_cast<int64_t>(batches_.size())) return std::optional<Example>();
  absl::StatusOr<Example> batch = workers_.empty() ? LoadBatch(next_batch_) : TakeFromWindow(next_batch_);
  if (!batch.ok()) {
    epoch_error_ = batch.status();
    StopWorkers();
    return epoch_error_;
  }
  samples_delivered_ += static_cast<int64_t>(batches_[next_batch_].size());
  ++next_batch_;
  return std::optional<Example>(std::move(batch).value());
}

absl::StatusOr<Example> DataLoader::LoadBatch(int64_t b) const {
  const std::vector<int64_t>& indices = batches_[b];
  absl::StatusOr<Example> batch = dataset_->GetBatch(indices);
  if (batch.ok()) {
    batch->indices = indices;
    return batch;
  }
  // Find the sample to blame: the first index that fails on its own (datasets may gather in bulk).
  for (int64_t index : indices) {
    absl::Status status = (index >= 0 && index < dataset_->Size())
                              ? dataset_->Get(index).status()
                              : absl::OutOfRangeError(absl::StrCat("index outside [0, ", dataset_->Size(), ")"));
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("DataLoader: batch ", b, ", sample index ", index, ": ",
                                                      status.message()));
    }
  }
  return absl::Status(batch.status().code(), absl::StrCat("DataLoader: batch ", b, " (sample indices ",
                                                          indices.front(), "...", indices.back(),
                                                          "): ", batch.status().message()));
}

void DataLoader::WorkerLoop(int worker) {
  (void)worker;
  SetNumThreads(1);  // kernels in a dataset's GetBatch run on this thread alone (PyTorch's workers alike)
  const int64_t window = static_cast<int64_t>(options_.num_workers) * options_.prefetch_factor;
  const int64_t total = static_cast<int64_t>(batches_.size());
  while (true) {
    int64_t b;
    {
      absl::MutexLock lock(&mu_);
      auto can_claim = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || next_to_claim_ >= total || next_to_claim_ < window_begin_ + window;
      };
      while (!mu_.AwaitWithTimeout(absl::Condition(&can_claim), kWorkerPoll)) {
      }
      if (stopping_ || next_to_claim_ >= total) return;
      b = next_to_claim_++;
    }
    absl::StatusOr<Example> batch = LoadBatch(b);
    absl::MutexLock lock(&mu_);
    ready_.emplace(b, std::move(batch));
  }
}

absl::StatusOr<Example> DataLoader::TakeFromWindow(int64_t b) {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ready_.count(b) > 0; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), options_.timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("DataLoader: batch ", b, " not loaded within ",
                                                    absl::FormatDuration(options_.timeout), " by ",
                                                    options_.num_workers, " worker thread(s)"));
  }
  auto node = ready_.extract(b);
  window_begin_ = b + 1;
  return std::move(node.mapped());
}

void DataLoader::StopWorkers() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
  absl::MutexLock lock(&mu_);
  ready_.clear();
}

}  // namespace ddp
