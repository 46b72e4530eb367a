#include "bench/premade_batches.h"

#include <utility>

namespace ddp {

absl::StatusOr<std::vector<Example>> PremadeBatches(const Dataset& dataset, int64_t batch_size) {
  std::vector<Example> batches;
  for (int64_t b = 0; b < 64; ++b) {
    std::vector<int64_t> indices(batch_size);
    for (int64_t i = 0; i < batch_size; ++i) indices[i] = (b * batch_size + i) % dataset.Size();
    absl::StatusOr<Example> batch = dataset.GetBatch(indices);
    if (!batch.ok()) return batch.status();
    batches.push_back(*std::move(batch));
  }
  return batches;
}

SgdOptions BenchSgdOptions() {
  SgdOptions options;
  options.lr = 0.01f;
  options.momentum = 0.9f;
  return options;
}

}  // namespace ddp
