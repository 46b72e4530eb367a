#include "data/image_dataset.h"

#include <cstring>
#include <utility>

#include "base/check.h"
#include "base/fnv1a.h"
#include "tensor/ops.h"

namespace ddp {

ImageDataset::ImageDataset(std::vector<uint8_t> pixels, Shape image_shape, Tensor labels,
                           ImageNormalization norm)
    : pixels_(std::move(pixels)), image_shape_(std::move(image_shape)), labels_(std::move(labels)) {
  image_size_ = 1;
  for (int64_t d : image_shape_) image_size_ *= d;
  DDP_CHECK(labels_.dim() == 1 && labels_.dtype() == DType::kInt64 && labels_.is_contiguous() &&
            labels_.device().is_cpu())
      << "ImageDataset: labels must be a contiguous CPU int64 tensor [n], got "
      << ShapeToString(labels_.shape());
  DDP_CHECK(static_cast<int64_t>(pixels_.size()) == labels_.shape()[0] * image_size_)
      << "ImageDataset: " << pixels_.size() << " pixels for " << labels_.shape()[0] << " images of "
      << ShapeToString(image_shape_);
  DDP_CHECK(image_shape_.size() == 3)
      << "ImageDataset: image shape " << ShapeToString(image_shape_) << " is not [channels, height, width]";
  const int64_t channels = image_shape_[0];
  const auto per_channel = [channels](const std::vector<float>& values) {
    return static_cast<int64_t>(values.size()) == channels || values.size() == 1;
  };
  DDP_CHECK(per_channel(norm.mean) && per_channel(norm.stddev))
      << "ImageDataset: " << norm.mean.size() << " means and " << norm.stddev.size() << " stddevs for "
      << channels << " channels";
  for (int64_t c = 0; c < channels; ++c) {
    const float mean = norm.mean[norm.mean.size() == 1 ? 0 : c];
    const float stddev = norm.stddev[norm.stddev.size() == 1 ? 0 : c];
    DDP_CHECK(stddev > 0) << "ImageDataset: stddev " << stddev << " for channel " << c;
    scale_.push_back(1.0f / (255.0f * stddev));
    shift_.push_back(mean / stddev);
  }
}

absl::StatusOr<Example> ImageDataset::Get(int64_t index) const {
  DDP_ASSIGN_OR_RETURN(Example batch, GetBatch({index}));
  return Example{Reshape(batch.input, image_shape_), Reshape(batch.target, Shape{})};
}

absl::StatusOr<Example> ImageDataset::GetBatch(const std::vector<int64_t>& indices) const {
  DDP_RETURN_IF_ERROR(CheckDatasetIndices(indices, Size()));
  const int64_t n = static_cast<int64_t>(indices.size());
  Shape input_shape = image_shape_;
  input_shape.insert(input_shape.begin(), n);
  Tensor input = Tensor::Empty(input_shape);
  Tensor target = Tensor::Empty({n}, DType::kInt64);
  float* x = input.data<float>();
  int64_t* y = target.data<int64_t>();
  const int64_t* labels = labels_.data<int64_t>();
  const int64_t channels = image_shape_[0], plane = image_size_ / channels;
  const bool augment = augmentation_.enabled();
  const int64_t epoch = epoch_.load(std::memory_order_relaxed);
  std::vector<uint8_t> augmented(augment ? image_size_ : 0);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* image = pixels_.data() + indices[i] * image_size_;
    if (augment) {
      ApplyCropFlip(image, channels, image_shape_[1], image_shape_[2],
                    DrawCropFlip(augmentation_, epoch, indices[i]), augmented.data());
      image = augmented.data();
    }
    float* row = x + i * image_size_;
    for (int64_t c = 0; c < channels; ++c) {
      const float scale = scale_[c], shift = shift_[c];
      for (int64_t p = c * plane; p < (c + 1) * plane; ++p) row[p] = image[p] * scale - shift;
    }
    y[i] = labels[indices[i]];
  }
  return Example{std::move(input), std::move(target)};
}

uint64_t ImageDataset::Fingerprint() const {
  // FNV-1a's step over 8-byte words (eight times fewer multiplications than over bytes): each step is a
  // bijection of the running value for a given word, so two inputs that differ in one word always differ.
  constexpr uint64_t kPrime = 0x100000001b3ull;
  const auto words = [](const uint8_t* data, size_t size, uint64_t hash) {
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
      uint64_t word;
      std::memcpy(&word, data + i, 8);
      hash = (hash ^ word) * kPrime;
    }
    return Fnv1a64(data + i, size - i, hash);
  };
  uint64_t hash = Fnv1a64(image_shape_.data(), image_shape_.size() * sizeof(int64_t));
  hash = words(static_cast<const uint8_t*>(labels_.raw_data()), static_cast<size_t>(labels_.nbytes()), hash);
  return words(pixels_.data(), pixels_.size(), hash);
}

int64_t ImageDataset::held_bytes() const { return static_cast<int64_t>(pixels_.size()) + labels_.nbytes(); }

}  // namespace ddp
