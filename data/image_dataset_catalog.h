// The image data sets the train program knows by name (--dataset), with what a model built for them
// needs to know: the image shape and the number of classes.
#ifndef DDP_DATA_IMAGE_DATASET_CATALOG_H_
#define DDP_DATA_IMAGE_DATASET_CATALOG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/fashion_mnist.h"
#include "data/image_dataset.h"
#include "tensor/tensor.h"

namespace ddp {

// One data set of the catalog.
struct ImageDatasetInfo {
  std::string name;         // the --dataset value: "fashion_mnist"
  Shape image_shape;        // one example's input, [channels, height, width]
  int64_t num_classes = 0;  // labels are 0 .. num_classes - 1
  std::string default_dir;  // where a Debian package installs it; "" when none does
  std::string files;        // what the data folder holds, for --help and errors
};

// The names, in the order --help lists them: fashion_mnist, mnist, cifar10, cifar100.
std::vector<std::string> ImageDatasetNames();

// The entry `name`; an unknown name is an error listing the valid ones.
absl::StatusOr<ImageDatasetInfo> FindImageDataset(const std::string& name);

// Loads `split` of data set `name` from `dir` ("" for its default_dir; an error when it has none),
// normalised with the training set's statistics (data/fashion_mnist.h, data/cifar.h; MNIST: mean 0.1307,
// stddev 0.3081). `dir` may also be the root torchvision's datasets download into: MNIST/raw/ and
// FashionMNIST/raw/ inside it hold the IDX files, cifar-10-batches-py/ and cifar-100-python/ CIFAR's Python
// versions. Errors are the loaders', naming the file.
absl::StatusOr<std::shared_ptr<ImageDataset>> LoadImageDataset(const std::string& name,
                                                               const std::string& dir, Split split);

}  // namespace ddp

#endif  // DDP_DATA_IMAGE_DATASET_CATALOG_H_
