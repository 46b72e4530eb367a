// BatchSource: where the step loop (train/train_step.h) takes its batches from. train/train reads them
// through a DataLoader over this rank's DistributedSampler shard (LoaderBatches); a benchmark of the same
// loop hands it batches made before the loop, so that what it times is the loop users run, without the
// loader.
#ifndef DDP_TRAIN_BATCH_SOURCE_H_
#define DDP_TRAIN_BATCH_SOURCE_H_

#include <optional>

#include "absl/status/statusor.h"
#include "data/data_loader.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace ddp {

// The batches of one run of the step loop. Not thread-safe: the training thread only.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The next batch of this rank; std::nullopt when there is none left; an error names what failed (a
  // loader error names the sample index).
  virtual absl::StatusOr<std::optional<Example>> Next() = 0;
  // The sampler whose position a checkpoint records, or null when the batches have none (then a
  // checkpoint of the loop is refused with FailedPrecondition).
  virtual const DistributedSampler* sampler() const { return nullptr; }
};

// A DataLoader's batches, whose sampler is a DistributedSampler (train/train's loader). Neither is owned;
// the loader must outlive this and be begun (DataLoader::Begin) before the first Next.
class LoaderBatches : public BatchSource {
 public:
  // REQUIRES: loader.sampler() is a DistributedSampler.
  explicit LoaderBatches(DataLoader& loader);

  absl::StatusOr<std::optional<Example>> Next() override { return loader_.Next(); }
  const DistributedSampler* sampler() const override { return sampler_; }

 private:
  DataLoader& loader_;
  const DistributedSampler* const sampler_;
};

}  // namespace ddp

#endif  // DDP_TRAIN_BATCH_SOURCE_H_
