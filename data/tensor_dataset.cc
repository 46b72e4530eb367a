#include "data/tensor_dataset.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

// Copies rows `indices` of `source` into a new tensor with a leading batch dimension.
Tensor GatherRows(const Tensor& source, const std::vector<int64_t>& indices) {
  Shape shape = source.shape();
  shape[0] = static_cast<int64_t>(indices.size());
  Tensor out = Tensor::Empty(shape, source.dtype());
  const size_t row_bytes = source.shape()[0] == 0 ? 0 : source.nbytes() / source.shape()[0];
  const char* src = static_cast<const char*>(source.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for (size_t i = 0; i < indices.size(); ++i) std::memcpy(dst + i * row_bytes, src + indices[i] * row_bytes, row_bytes);
  return out;
}

}  // namespace

TensorDataset::TensorDataset(Tensor inputs, Tensor targets)
    : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  DDP_CHECK(inputs_.dim() >= 1 && targets_.dim() >= 1 && inputs_.shape()[0] == targets_.shape()[0])
      << "TensorDataset: inputs " << ShapeToString(inputs_.shape()) << " and targets "
      << ShapeToString(targets_.shape()) << " differ in length";
  DDP_CHECK(inputs_.is_contiguous() && targets_.is_contiguous() && inputs_.device().is_cpu())
      << "TensorDataset needs contiguous CPU tensors";
}

absl::StatusOr<Example> TensorDataset::Get(int64_t index) const {
  DDP_RETURN_IF_ERROR(CheckDatasetIndices({index}, Size()));
  Example example;
  example.input = Reshape(GatherRows(inputs_, {index}), Shape(inputs_.shape().begin() + 1, inputs_.shape().end()));
  example.target = Reshape(GatherRows(targets_, {index}), Shape(targets_.shape().begin() + 1, targets_.shape().end()));
  return example;
}

absl::StatusOr<Example> TensorDataset::GetBatch(const std::vector<int64_t>& indices) const {
  DDP_RETURN_IF_ERROR(CheckDatasetIndices(indices, Size()));
  return Example{GatherRows(inputs_, indices), GatherRows(targets_, indices)};
}

}  // namespace ddp
