// Images kept as the 8-bit pixels they are stored in, normalised to float32 as examples are drawn
// (torchvision's datasets with ToTensor + Normalize), optionally randomly cropped and flipped first
// (data/image_augmentation.h): a quarter of the memory of a float32 copy, per rank.
#ifndef DDP_DATA_IMAGE_DATASET_H_
#define DDP_DATA_IMAGE_DATASET_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "data/dataset.h"
#include "data/image_augmentation.h"

namespace ddp {

// The affine map from a pixel x in 0..255 of channel c to the model's input: ((x / 255) - mean[c]) /
// stddev[c] (torchvision's ToTensor + Normalize), computed as x * scale - shift with scale = 1 / (255 *
// stddev) and shift = mean / stddev. One value serves every channel. The defaults are Fashion-MNIST's
// training-set statistics; data/cifar.h has CIFAR's.
struct ImageNormalization {
  std::vector<float> mean = {0.2860f};  // of x / 255: one per channel, or one for all
  std::vector<float> stddev = {0.3530f};
};

// Example i is (the normalised float32 image i of shape image_shape, the int64 label i), cropped and
// flipped by the draw for (epoch, i) when augmentation is set. Reads are thread-safe, and so is SetEpoch
// against them; set_augmentation must come before the dataset is shared.
class ImageDataset : public Dataset {
 public:
  // `pixels` holds n images of shape `image_shape` ([channels, height, width]) one after another; `labels`
  // is an int64 tensor [n].
  // REQUIRES: image_shape is [c, h, w]; pixels.size() == n * c * h * w; labels is a contiguous CPU int64
  // tensor [n]; norm.mean and norm.stddev hold 1 or c values; every stddev > 0.
  ImageDataset(std::vector<uint8_t> pixels, Shape image_shape, Tensor labels, ImageNormalization norm = {});

  int64_t Size() const override { return labels_.shape()[0]; }
  absl::StatusOr<Example> Get(int64_t index) const override;
  // Normalises rows `indices` straight into one float32 batch [indices.size(), c, h, w].
  absl::StatusOr<Example> GetBatch(const std::vector<int64_t>& indices) const override;

  // One example's input shape, [c, h, w].
  const Shape& image_shape() const { return image_shape_; }
  // The memory the dataset holds: its pixels and labels.
  int64_t held_bytes() const;
  // A checksum of the image shape, the labels and the pixels (not the normalisation or augmentation):
  // equal data give equal fingerprints, and any one changed pixel or label changes it. Reads every byte
  // (about 40 ms for CIFAR-10's training set); pure.
  uint64_t Fingerprint() const;

  // Randomly crop and flip every example drawn from now on (options.enabled() false: none).
  // REQUIRES: no other thread uses the dataset yet.
  void set_augmentation(const RandomCropFlip& options) { augmentation_ = options; }
  const RandomCropFlip& augmentation() const { return augmentation_; }
  // The epoch the augmentation draws for (DrawCropFlip), as a sampler's SetEpoch; 0 until set. Batches
  // drawn while it changes get either epoch's draws.
  void SetEpoch(int64_t epoch) { epoch_.store(epoch, std::memory_order_relaxed); }

 private:
  std::vector<uint8_t> pixels_;
  Shape image_shape_;
  int64_t image_size_ = 0;  // pixels per image
  Tensor labels_;
  std::vector<float> scale_, shift_;  // per channel
  RandomCropFlip augmentation_;
  std::atomic<int64_t> epoch_{0};
};

}  // namespace ddp

#endif  // DDP_DATA_IMAGE_DATASET_H_
