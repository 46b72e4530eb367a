// Fashion-MNIST and MNIST (same IDX layout) as in-memory datasets.
#ifndef DDP_DATA_FASHION_MNIST_H_
#define DDP_DATA_FASHION_MNIST_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/image_dataset.h"

namespace ddp {

enum class Split { kTrain, kTest };

// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// Loads `dir`/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] into a dataset whose examples are
// inputs [1, 28, 28] float32, preprocessed as ((x / 255) - mean) / stddev as they are drawn, and int64
// labels; it holds the pixels as bytes (47 MB for the training set instead of 188 MB as float32).
// Errors name the file: missing (and the package that provides it), truncated, corrupt, or images and
// labels that disagree in count or hold labels outside 0..9.
absl::StatusOr<std::shared_ptr<ImageDataset>> LoadFashionMnist(const std::string& dir, Split split,
                                                               ImageNormalization norm = {});

}  // namespace ddp

#endif  // DDP_DATA_FASHION_MNIST_H_
