#include "data/fashion_mnist.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "data/idx_reader.h"

namespace ddp {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;  // not opened: a FIFO there would block the open
}

// Prefers the gzip file, falls back to an uncompressed one with the same stem.
std::string ResolvePath(const std::string& dir, const std::string& stem) {
  const std::string gz = absl::StrCat(dir, "/", stem, ".gz");
  if (Exists(gz)) return gz;
  const std::string plain = absl::StrCat(dir, "/", stem);
  if (Exists(plain)) return plain;
  return gz;  // the error message names the expected file
}

}  // namespace

absl::StatusOr<std::shared_ptr<ImageDataset>> LoadFashionMnist(const std::string& dir, Split split,
                                                               ImageNormalization norm) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string image_path = ResolvePath(dir, prefix + "-images-idx3-ubyte");
  const std::string label_path = ResolvePath(dir, prefix + "-labels-idx1-ubyte");
  DDP_ASSIGN_OR_RETURN(IdxArray images, ReadIdxFile(image_path));
  DDP_ASSIGN_OR_RETURN(IdxArray labels, ReadIdxFile(label_path));
  if (images.dims.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(image_path, ": expected 3 dimensions, got ", images.dims.size()));
  }
  if (labels.dims.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(label_path, ": expected 1 dimension, got ", labels.dims.size()));
  }
  if (images.dims[0] != labels.dims[0]) {
    return absl::InvalidArgumentError(absl::StrCat(image_path, " has ", images.dims[0], " images but ", label_path,
                                                   " has ", labels.dims[0], " labels"));
  }
  const int64_t n = images.dims[0], h = images.dims[1], w = images.dims[2];
  Tensor targets = Tensor::Empty({n}, DType::kInt64);
  int64_t* y = targets.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (labels.data[i] > 9) {
      return absl::InvalidArgumentError(absl::StrCat(label_path, ": label ", int{labels.data[i]}, " at index ", i,
                                                     " is outside 0..9"));
    }
    y[i] = labels.data[i];
  }
  return std::make_shared<ImageDataset>(std::move(images.data), Shape{1, h, w}, std::move(targets), norm);
}

}  // namespace ddp
