#include "data/image_augmentation.h"

#include <algorithm>
#include <cstring>

namespace ddp {
namespace {

// SplitMix64's finaliser: a bijection of 64-bit values whose outputs pass statistical tests for
// consecutive inputs, so (seed, epoch, index) chained through it give independent-looking draws.
uint64_t Mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

CropFlipDraw DrawCropFlip(const RandomCropFlip& options, int64_t epoch, int64_t index) {
  const uint64_t bits =
      Mix(Mix(Mix(options.seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(index));
  CropFlipDraw draw;
  if (options.padding > 0) {
    // The two offsets from disjoint 28-bit fields; a modulo bias of at most (2p + 1) / 2^28 is negligible.
    const uint64_t span = static_cast<uint64_t>(2 * options.padding + 1);
    draw.dy = static_cast<int64_t>((bits & 0xFFFFFFFull) % span) - options.padding;
    draw.dx = static_cast<int64_t>(((bits >> 28) & 0xFFFFFFFull) % span) - options.padding;
  }
  draw.flip = options.horizontal_flip && (bits >> 63) != 0;
  return draw;
}

void ApplyCropFlip(const uint8_t* source, int64_t channels, int64_t height, int64_t width, const CropFlipDraw& draw,
                   uint8_t* out) {
  // Output column x reads source column x + dx (before the flip), so the columns whose source lies inside
  // the image are [first, last); the rest are black. A flip then mirrors the row.
  const int64_t first = std::clamp<int64_t>(-draw.dx, 0, width);
  const int64_t last = std::clamp<int64_t>(width - draw.dx, first, width);
  for (int64_t c = 0; c < channels; ++c) {
    const uint8_t* plane = source + c * height * width;
    for (int64_t y = 0; y < height; ++y) {
      uint8_t* row = out + (c * height + y) * width;
      const int64_t sy = y + draw.dy;
      if (sy < 0 || sy >= height || first == last) {
        std::memset(row, 0, static_cast<size_t>(width));
        continue;
      }
      const uint8_t* source_row = plane + sy * width;  // column x of the output reads x + dx here
      if (!draw.flip) {
        std::memset(row, 0, static_cast<size_t>(first));
        std::memcpy(row + first, source_row + first + draw.dx, static_cast<size_t>(last - first));
        std::memset(row + last, 0, static_cast<size_t>(width - last));
        continue;
      }
      // Flipped: output column width - 1 - x holds what column x would hold unflipped.
      std::memset(row + width - first, 0, static_cast<size_t>(first));
      for (int64_t x = first; x < last; ++x) row[width - 1 - x] = source_row[x + draw.dx];
      std::memset(row, 0, static_cast<size_t>(width - last));
    }
  }
}

}  // namespace ddp
