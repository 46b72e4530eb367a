// Map-style datasets (torch.utils.data.Dataset): a size and random access to examples.
#ifndef DDP_DATA_DATASET_H_
#define DDP_DATA_DATASET_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace ddp {

// One example, or a batch of them (then each tensor has a leading batch dimension).
struct Example {
  Tensor input;
  Tensor target;
  // The dataset indices of a batch's rows, in row order, when a DataLoader made it (which samples a step
  // trained on: train/train --log_samples); empty otherwise.
  std::vector<int64_t> indices;
};

// A map-style dataset. Implementations must be safe to read from several threads at once (loader
// workers call Get/GetBatch concurrently); they are immutable after construction.
class Dataset {
 public:
  virtual ~Dataset() = default;
  // Number of examples.
  virtual int64_t Size() const = 0;
  // Example `index`. An error (e.g. a corrupt record) names the index. REQUIRES: 0 <= index < Size().
  virtual absl::StatusOr<Example> Get(int64_t index) const = 0;
  // The examples at `indices`, stacked along a new leading dimension into contiguous tensors. The
  // default collates Get() results; datasets backed by one tensor override it with a direct gather.
  virtual absl::StatusOr<Example> GetBatch(const std::vector<int64_t>& indices) const;
};

// OK when every index is in [0, size); else OutOfRange naming the first one that is not ("index 7 out of
// range for dataset of 5"), the error every Dataset's Get/GetBatch gives.
absl::Status CheckDatasetIndices(const std::vector<int64_t>& indices, int64_t size);

// Stacks examples of equal shapes into one batch (contiguous). An error names the first example whose
// shape differs. REQUIRES: !examples.empty().
absl::StatusOr<Example> Collate(const std::vector<Example>& examples);

}  // namespace ddp

#endif  // DDP_DATA_DATASET_H_
