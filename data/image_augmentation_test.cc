// Random crop and flip: the draws are a pure function of (seed, epoch, index), cover every offset, and
// applying one equals torchvision's pad -> crop -> flip done literally.
#include "data/image_augmentation.h"

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

namespace ddp {
namespace {

TEST(ImageAugmentationTest, DrawsDependOnSeedEpochAndIndexOnly) {
  const RandomCropFlip options{4, true, 17};
  int differ_by_epoch = 0, differ_by_seed = 0;
  for (int64_t index = 0; index < 1000; ++index) {
    const CropFlipDraw a = DrawCropFlip(options, 3, index), again = DrawCropFlip(options, 3, index);
    EXPECT_EQ(std::make_tuple(a.dy, a.dx, a.flip), std::make_tuple(again.dy, again.dx, again.flip));
    const CropFlipDraw next_epoch = DrawCropFlip(options, 4, index);
    const CropFlipDraw other_seed = DrawCropFlip(RandomCropFlip{4, true, 18}, 3, index);
    differ_by_epoch +=
        std::make_tuple(a.dy, a.dx, a.flip) != std::make_tuple(next_epoch.dy, next_epoch.dx, next_epoch.flip);
    differ_by_seed +=
        std::make_tuple(a.dy, a.dx, a.flip) != std::make_tuple(other_seed.dy, other_seed.dx, other_seed.flip);
  }
  // Independent draws differ with probability 1 - 1/162.
  EXPECT_GT(differ_by_epoch, 970);
  EXPECT_GT(differ_by_seed, 970);
}

TEST(ImageAugmentationTest, OffsetsAreUniformAndTheFlipAFairCoin) {
  const RandomCropFlip options{2, true, 5};
  const int kDraws = 25000;
  std::vector<int> dy_count(5), dx_count(5);
  int flips = 0, dy_equals_dx = 0;
  for (int64_t index = 0; index < kDraws; ++index) {
    const CropFlipDraw draw = DrawCropFlip(options, 0, index);
    ASSERT_GE(draw.dy, -2);
    ASSERT_LE(draw.dy, 2);
    ASSERT_GE(draw.dx, -2);
    ASSERT_LE(draw.dx, 2);
    ++dy_count[draw.dy + 2];
    ++dx_count[draw.dx + 2];
    flips += draw.flip;
    dy_equals_dx += draw.dy == draw.dx;
  }
  for (int k = 0; k < 5; ++k) {  // 5000 expected each; 4 standard deviations is about 250
    EXPECT_NEAR(dy_count[k], kDraws / 5, 250) << "dy " << k - 2;
    EXPECT_NEAR(dx_count[k], kDraws / 5, 250) << "dx " << k - 2;
  }
  EXPECT_NEAR(flips, kDraws / 2, 320);
  EXPECT_NEAR(dy_equals_dx, kDraws / 5, 250);  // independent offsets agree 1 time in 5
}

TEST(ImageAugmentationTest, NothingEnabledDrawsTheIdentity) {
  EXPECT_FALSE(RandomCropFlip{}.enabled());
  for (int64_t index = 0; index < 100; ++index) {
    const CropFlipDraw draw = DrawCropFlip(RandomCropFlip{0, false, 9}, 1, index);
    EXPECT_EQ(draw.dy, 0);
    EXPECT_EQ(draw.dx, 0);
    EXPECT_FALSE(draw.flip);
  }
  // Only a flip: the offsets stay 0.
  for (int64_t index = 0; index < 100; ++index)
    EXPECT_EQ(DrawCropFlip(RandomCropFlip{0, true, 9}, 1, index).dx, 0);
}

// torchvision's RandomCrop(size, padding=p) then RandomHorizontalFlip, written out: pad every side of each
// plane with p zeros, take the window at (top, left) = (dy + p, dx + p), mirror it when flipping.
std::vector<uint8_t> PadCropFlip(const std::vector<uint8_t>& image, int channels, int h, int w, int p,
                                 const CropFlipDraw& draw) {
  const int ph = h + 2 * p, pw = w + 2 * p;
  std::vector<uint8_t> padded(channels * ph * pw, 0);
  for (int c = 0; c < channels; ++c) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) padded[(c * ph + y + p) * pw + x + p] = image[(c * h + y) * w + x];
    }
  }
  std::vector<uint8_t> out(channels * h * w);
  for (int c = 0; c < channels; ++c) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const uint8_t cropped = padded[(c * ph + y + draw.dy + p) * pw + x + draw.dx + p];
        out[(c * h + y) * w + (draw.flip ? w - 1 - x : x)] = cropped;
      }
    }
  }
  return out;
}

TEST(ImageAugmentationTest, ApplyingADrawIsPadThenCropThenFlip) {
  const int channels = 2, h = 5, w = 4, p = 2;
  std::vector<uint8_t> image(channels * h * w);
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<uint8_t>(i + 1);  // no pixel is 0
  int cases = 0;
  for (int dy = -p; dy <= p; ++dy) {
    for (int dx = -p; dx <= p; ++dx) {
      for (bool flip : {false, true}) {
        const CropFlipDraw draw{dy, dx, flip};
        std::vector<uint8_t> out(image.size(), 77);
        ApplyCropFlip(image.data(), channels, h, w, draw, out.data());
        EXPECT_EQ(out, PadCropFlip(image, channels, h, w, p, draw))
            << "dy " << dy << " dx " << dx << " flip " << flip;
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 50);
  // The identity draw copies; a flip alone mirrors each row.
  std::vector<uint8_t> out(image.size());
  ApplyCropFlip(image.data(), channels, h, w, CropFlipDraw{}, out.data());
  EXPECT_EQ(out, image);
  ApplyCropFlip(image.data(), channels, h, w, CropFlipDraw{0, 0, true}, out.data());
  EXPECT_EQ((std::vector<uint8_t>(out.begin(), out.begin() + 4)), (std::vector<uint8_t>{4, 3, 2, 1}));
}

}  // namespace
}  // namespace ddp
