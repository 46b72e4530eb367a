// Random crops and horizontal flips of training images, as torchvision's
//   transforms.RandomCrop(size, padding=p), transforms.RandomHorizontalFlip()
// compose them for CIFAR training, drawn from (seed, epoch, sample index) alone: an image gets the same
// crop and flip whichever rank, worker thread or batch loads it, and a resumed run draws what the
// uninterrupted run drew.
#ifndef DDP_DATA_IMAGE_AUGMENTATION_H_
#define DDP_DATA_IMAGE_AUGMENTATION_H_

#include <cstdint>

namespace ddp {

// Which transforms to apply. The default applies none.
struct RandomCropFlip {
  int64_t padding = 0;           // pad each side with this many black (0) pixels, then crop a window of the
                                 // image's size at a uniformly drawn offset (0: no crop)
  bool horizontal_flip = false;  // then mirror left-right with probability 1/2
  uint64_t seed = 0;             // the draws' seed

  bool enabled() const { return padding > 0 || horizontal_flip; }
};

// One image's draw. Output pixel (y, x) of an h x w image is source pixel
//   (y + dy, (flip ? w - 1 - x : x) + dx),
// black where that lies outside the image. dy, dx are in [-padding, padding].
struct CropFlipDraw {
  int64_t dy = 0;
  int64_t dx = 0;
  bool flip = false;
};

// The draw for sample `index` in `epoch`: a pure function of (options, epoch, index). dy and dx are
// uniform over the 2 * padding + 1 offsets (torchvision's crop origin, minus padding), flip is a fair coin
// when horizontal_flip; all independent.
CropFlipDraw DrawCropFlip(const RandomCropFlip& options, int64_t epoch, int64_t index);

// Writes `draw` applied to `source` (channels planes of height x width bytes) to `out` (same layout).
// REQUIRES: source and out do not overlap.
void ApplyCropFlip(const uint8_t* source, int64_t channels, int64_t height, int64_t width,
                   const CropFlipDraw& draw, uint8_t* out);

}  // namespace ddp

#endif  // DDP_DATA_IMAGE_AUGMENTATION_H_
