// Fashion-MNIST and MNIST (same IDX layout) as in-memory datasets.
#ifndef DDP_DATA_FASHION_MNIST_H_
#define DDP_DATA_FASHION_MNIST_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/tensor_dataset.h"

namespace ddp {

enum class Split { kTrain, kTest };

// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// Fashion-MNIST's pixel statistics (mean and standard deviation of the training set's pixels scaled to
// [0, 1]); MNIST callers may pass their own.
struct ImageNormalization {
  float mean = 0.2860f;  // of x / 255
  float stddev = 0.3530f;
};

// Loads `dir`/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] into a dataset of inputs
// [n, 1, 28, 28] float32, preprocessed as ((x / 255) - mean) / stddev, and int64 labels [n].
// Errors name the file: missing (and the package that provides it), truncated, corrupt, or images and
// labels that disagree in count or hold labels outside 0..9.
absl::StatusOr<std::shared_ptr<TensorDataset>> LoadFashionMnist(const std::string& dir, Split split,
                                                                 ImageNormalization norm = {});

}  // namespace ddp

#endif  // DDP_DATA_FASHION_MNIST_H_
