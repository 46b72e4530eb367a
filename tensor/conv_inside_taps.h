// Which (output pixel, tap) pairs of a convolution read inside its input rather than the padding: the
// per-axis ranges of output positions and the padded fraction that the channels-last passes skipping the
// padding take as their rule (Note [Weight gradients tap by tap], Note [Forward by pixel class], Note
// [Input gradients tap by tap]). Internal to the tensor floor.
#ifndef DDP_TENSOR_CONV_INSIDE_TAPS_H_
#define DDP_TENSOR_CONV_INSIDE_TAPS_H_

#include <algorithm>
#include <cstdint>

#include "tensor/conv_kernels.h"

namespace ddp {
namespace cpu {

// The fraction of (output pixel, tap) pairs in the padding at or above which the passes skipping the
// padding run in place of the unfolded rows (or oneDNN's primitives).
inline constexpr double kMinPaddedTapFraction = 0.15;

// Output positions [first, end) along one axis.
struct InsideOutputRange {
  int64_t first, end;
  int64_t size() const { return end - first; }
};

// The output positions along one axis (`outputs` of them, over an input axis of `size` positions) whose
// tap at kernel offset k reads inside: 0 <= o * g.stride - g.padding + k < size.
inline InsideOutputRange InsideOutputs(int64_t k, int64_t size, int64_t outputs, const ConvGeometry& g) {
  const int64_t low = g.padding - k;              // o * stride >= low
  const int64_t high = size - 1 + g.padding - k;  // o * stride <= high
  const int64_t first = low <= 0 ? 0 : (low + g.stride - 1) / g.stride;
  const int64_t end = high < 0 ? 0 : std::min(outputs, high / g.stride + 1);
  return {std::min(first, end), end};
}

// The fraction of g's (output pixel, tap) pairs whose input pixel falls in the padding (0 for a convolution
// without padding whose taps stay inside, and for one without output pixels).
inline double PaddedTapFraction(const ConvGeometry& g) {
  const int64_t pairs = g.P() * g.kh * g.kw;
  if (pairs == 0) return 0.0;
  int64_t inside = 0;
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      inside += InsideOutputs(ky, g.h, g.oh, g).size() * InsideOutputs(kx, g.w, g.ow, g).size();
    }
  }
  return 1.0 - static_cast<double>(inside) / static_cast<double>(pairs);
}

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CONV_INSIDE_TAPS_H_
