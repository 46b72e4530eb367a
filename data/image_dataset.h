// Images kept as the 8-bit pixels they are stored in, normalised to float32 as examples are drawn
// (torchvision's datasets with ToTensor + Normalize): a quarter of the memory of a float32 copy, per rank.
#ifndef DDP_DATA_IMAGE_DATASET_H_
#define DDP_DATA_IMAGE_DATASET_H_

#include <cstdint>
#include <vector>

#include "data/dataset.h"

namespace ddp {

// The affine map from a pixel x in 0..255 to the model's input: ((x / 255) - mean) / stddev, computed as
// x * scale - shift with scale = 1 / (255 * stddev) and shift = mean / stddev. The defaults are
// Fashion-MNIST's training-set statistics; MNIST callers may pass their own.
struct ImageNormalization {
  float mean = 0.2860f;  // of x / 255
  float stddev = 0.3530f;
};

// Example i is (the normalised float32 image i of shape image_shape, the int64 label i). Immutable and
// thread-safe for reads.
class ImageDataset : public Dataset {
 public:
  // `pixels` holds n images of shape `image_shape` ([channels, height, width]) one after another; `labels`
  // is an int64 tensor [n].
  // REQUIRES: pixels.size() == n * product(image_shape); labels is a contiguous CPU int64 tensor [n];
  // norm.stddev > 0.
  ImageDataset(std::vector<uint8_t> pixels, Shape image_shape, Tensor labels, ImageNormalization norm = {});

  int64_t Size() const override { return labels_.shape()[0]; }
  absl::StatusOr<Example> Get(int64_t index) const override;
  // Normalises rows `indices` straight into one float32 batch [indices.size(), c, h, w].
  absl::StatusOr<Example> GetBatch(const std::vector<int64_t>& indices) const override;

  // One example's input shape, [c, h, w].
  const Shape& image_shape() const { return image_shape_; }
  // The memory the dataset holds: its pixels and labels.
  int64_t held_bytes() const;

 private:
  std::vector<uint8_t> pixels_;
  Shape image_shape_;
  int64_t image_size_ = 0;  // pixels per image
  Tensor labels_;
  float scale_ = 0.0f, shift_ = 0.0f;
};

}  // namespace ddp

#endif  // DDP_DATA_IMAGE_DATASET_H_
