// A dataset held in two tensors (torch.utils.data.TensorDataset).
#ifndef DDP_DATA_TENSOR_DATASET_H_
#define DDP_DATA_TENSOR_DATASET_H_

#include "data/dataset.h"

namespace ddp {

// Example i is (inputs[i], targets[i]). Immutable and thread-safe for reads.
class TensorDataset : public Dataset {
 public:
  // REQUIRES: inputs and targets are contiguous CPU tensors with the same leading dimension.
  TensorDataset(Tensor inputs, Tensor targets);

  int64_t Size() const override { return inputs_.shape()[0]; }
  absl::StatusOr<Example> Get(int64_t index) const override;
  // Gathers rows straight from the backing tensors (one memcpy per example and field).
  absl::StatusOr<Example> GetBatch(const std::vector<int64_t>& indices) const override;

  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_;
  Tensor targets_;
};

}  // namespace ddp

#endif  // DDP_DATA_TENSOR_DATASET_H_
