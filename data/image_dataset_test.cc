// ImageDataset: examples and batches are the normalised pixels and labels, gathered in index order.
#include "data/image_dataset.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor/factory.h"

namespace ddp {
namespace {

// Three 2x2 one-channel images: pixels 0..11 scaled by 20 (0, 20, ..., 220) and one 255.
ImageDataset ThreeImages(ImageNormalization norm = {}) {
  std::vector<uint8_t> pixels(12);
  for (int i = 0; i < 12; ++i) pixels[i] = static_cast<uint8_t>(i * 20);
  pixels[11] = 255;
  return ImageDataset(pixels, Shape{1, 2, 2}, FromVector(std::vector<int64_t>{7, 0, 3}, {3}), norm);
}

TEST(ImageDatasetTest, BatchesAreTheNormalisedPixelsInIndexOrder) {
  const ImageNormalization norm{{0.25f}, {0.5f}};
  const ImageDataset data = ThreeImages(norm);
  EXPECT_EQ(data.Size(), 3);
  EXPECT_EQ(data.image_shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(data.held_bytes(), 12 + 3 * 8);
  absl::StatusOr<Example> batch = data.GetBatch({2, 0, 2});
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->input.shape(), (Shape{3, 1, 2, 2}));
  EXPECT_EQ(batch->target.ToVector<int64_t>(), (std::vector<int64_t>{3, 7, 3}));
  const std::vector<float> x = batch->input.ToVector<float>();
  const int images[3] = {2, 0, 2};
  for (int row = 0; row < 3; ++row) {
    for (int p = 0; p < 4; ++p) {
      const int pixel = images[row] * 4 + p == 11 ? 255 : (images[row] * 4 + p) * 20;
      EXPECT_NEAR(x[row * 4 + p], (pixel / 255.0 - 0.25) / 0.5, 1e-6) << "row " << row << " pixel " << p;
    }
  }
}

TEST(ImageDatasetTest, OneExampleIsItsBatchRow) {
  const ImageDataset data = ThreeImages();
  absl::StatusOr<Example> one = data.Get(1);
  absl::StatusOr<Example> batch = data.GetBatch({0, 1});
  ASSERT_TRUE(one.ok() && batch.ok());
  EXPECT_EQ(one->input.shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(one->target.dim(), 0);
  EXPECT_EQ(one->target.ToVector<int64_t>(), (std::vector<int64_t>{0}));
  const std::vector<float> rows = batch->input.ToVector<float>();
  EXPECT_EQ(one->input.ToVector<float>(), std::vector<float>(rows.begin() + 4, rows.end()));
}

TEST(ImageDatasetTest, EachChannelHasItsOwnStatistics) {
  std::vector<uint8_t> pixels = {0, 51, 102, 153, 204, 255};  // one image, 3 channels of 1x2
  const ImageNormalization norm{{0.1f, 0.2f, 0.3f}, {0.5f, 0.25f, 2.0f}};
  const ImageDataset data(pixels, Shape{3, 1, 2}, FromVector(std::vector<int64_t>{4}, {1}), norm);
  const std::vector<float> x = data.Get(0)->input.ToVector<float>();
  for (int p = 0; p < 6; ++p) {
    EXPECT_NEAR(x[p], (pixels[p] / 255.0 - norm.mean[p / 2]) / norm.stddev[p / 2], 1e-6) << "pixel " << p;
  }
}

TEST(ImageDatasetTest, AugmentedRowsAreTheDrawnCropAndFlipOfTheirIndexAndEpoch) {
  // Four 2-channel 4x3 images of distinct non-zero bytes.
  std::vector<uint8_t> pixels(4 * 24);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i + 1);
  const ImageNormalization norm{{0.5f, 0.25f}, {0.5f, 0.25f}};
  ImageDataset data(pixels, Shape{2, 4, 3}, FromVector(std::vector<int64_t>{0, 1, 2, 3}, {4}), norm);
  const RandomCropFlip options{1, true, 42};
  data.set_augmentation(options);
  const std::vector<int64_t> order = {3, 1, 2, 0, 1};
  for (int64_t epoch : {0, 5}) {
    data.SetEpoch(epoch);
    const std::vector<float> x = data.GetBatch(order)->input.ToVector<float>();
    for (size_t row = 0; row < order.size(); ++row) {
      std::vector<uint8_t> want(24);
      ApplyCropFlip(pixels.data() + order[row] * 24, 2, 4, 3, DrawCropFlip(options, epoch, order[row]),
                    want.data());
      for (int p = 0; p < 24; ++p) {
        // A padded (black) pixel is -mean / stddev like any byte 0.
        EXPECT_NEAR(x[row * 24 + p], (want[p] / 255.0 - norm.mean[p / 12]) / norm.stddev[p / 12], 1e-6)
            << "epoch " << epoch << " row " << row << " pixel " << p;
      }
    }
    // The same index drawn twice in one batch gets the same crop and flip.
    EXPECT_EQ(std::vector<float>(x.begin() + 24, x.begin() + 48),
              std::vector<float>(x.begin() + 96, x.end()));
  }
}

// The fingerprint sees every pixel and label and the shape, and nothing else (not the normalisation).
TEST(ImageDatasetTest, TheFingerprintChangesWithAnyPixelOrLabel) {
  std::vector<uint8_t> pixels(3 * 25);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7);
  const Tensor labels = FromVector(std::vector<int64_t>{1, 2, 3}, {3});
  const uint64_t base = ImageDataset(pixels, Shape{1, 5, 5}, labels).Fingerprint();
  EXPECT_EQ(ImageDataset(pixels, Shape{1, 5, 5}, labels, ImageNormalization{{0.5f}, {0.1f}}).Fingerprint(),
            base);
  EXPECT_NE(ImageDataset(pixels, Shape{1, 25, 1}, labels).Fingerprint(), base);
  EXPECT_NE(
      ImageDataset(pixels, Shape{1, 5, 5}, FromVector(std::vector<int64_t>{1, 2, 4}, {3})).Fingerprint(),
      base);
  for (size_t at : {size_t{0}, size_t{8}, size_t{74}}) {  // a word's first byte, and the tail past the words
    std::vector<uint8_t> changed = pixels;
    ++changed[at];
    EXPECT_NE(ImageDataset(changed, Shape{1, 5, 5}, labels).Fingerprint(), base) << "pixel " << at;
  }
}

TEST(ImageDatasetTest, IndicesOutOfRangeAreErrors) {
  const ImageDataset data = ThreeImages();
  for (int64_t bad : {int64_t{-1}, int64_t{3}}) {
    absl::StatusOr<Example> batch = data.GetBatch({0, bad});
    ASSERT_FALSE(batch.ok());
    EXPECT_EQ(batch.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_NE(batch.status().message().find("out of range for dataset of 3"), std::string::npos);
    EXPECT_FALSE(data.Get(bad).ok());
  }
}

}  // namespace
}  // namespace ddp
