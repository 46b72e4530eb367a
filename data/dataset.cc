#include "data/dataset.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ddp {
namespace {

// Stacks one field (input or target) of all examples.
absl::StatusOr<Tensor> StackField(const std::vector<Example>& examples, bool input) {
  const Tensor& first = input ? examples[0].input : examples[0].target;
  Shape shape = first.shape();
  shape.insert(shape.begin(), static_cast<int64_t>(examples.size()));
  Tensor out = Tensor::Empty(shape, first.dtype(), first.device());
  const size_t bytes = first.nbytes();
  char* dst = static_cast<char*>(out.raw_data());
  for (size_t i = 0; i < examples.size(); ++i) {
    const Tensor& t = input ? examples[i].input : examples[i].target;
    if (t.shape() != first.shape() || t.dtype() != first.dtype() || !t.is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot collate example ", i, ": ",
                                                     input ? "input" : "target", " ", ShapeToString(t.shape()),
                                                     " differs from ", ShapeToString(first.shape())));
    }
    std::memcpy(dst + i * bytes, t.raw_data(), bytes);
  }
  return out;
}

}  // namespace

absl::Status CheckDatasetIndices(const std::vector<int64_t>& indices, int64_t size) {
  for (int64_t index : indices) {
    if (index < 0 || index >= size) {
      return absl::OutOfRangeError(absl::StrCat("index ", index, " out of range for dataset of ", size));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Example> Collate(const std::vector<Example>& examples) {
  DDP_CHECK(!examples.empty()) << "Collate of no examples";
  Example batch;
  DDP_ASSIGN_OR_RETURN(batch.input, StackField(examples, /*input=*/true));
  DDP_ASSIGN_OR_RETURN(batch.target, StackField(examples, /*input=*/false));
  return batch;
}

absl::StatusOr<Example> Dataset::GetBatch(const std::vector<int64_t>& indices) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t index : indices) {
    DDP_ASSIGN_OR_RETURN(Example example, Get(index));
    examples.push_back(std::move(example));
  }
  return Collate(examples);
}

}  // namespace ddp
