// Which input pixel each tap of a convolution reads, for the kernels that walk the taps of every output
// pixel (tensor/conv_channels_last.cc, tensor/conv_amx_weight_gradient.cc). Internal to the tensor floor.
#ifndef DDP_TENSOR_CONV_TAPS_H_
#define DDP_TENSOR_CONV_TAPS_H_

#include <cstdint>

#include "tensor/conv_kernels.h"

namespace ddp {
namespace cpu {

// Calls f(row, tap, pixel) for every output pixel `row` of images [first, first + count) (rows counted from
// the group's first) and tap t = ky * kw + kx, with `pixel` the input pixel's index in x (n * h * w pixels)
// or -1 where the tap falls in the padding. Images in parallel.
template <typename F>
void ForEachTap(const ConvGeometry& g, int64_t first, int64_t count, F f) {
#pragma omp parallel for if (count > 1 && count * g.P() * g.K() > (int64_t{1} << 16))
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const int64_t row = (i * g.oh + oy) * g.ow + ox;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const int64_t iy = oy * g.stride - g.padding + ky;
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t ix = ox * g.stride - g.padding + kx;
            const bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
            f(row, ky * g.kw + kx, inside ? ((first + i) * g.h + iy) * g.w + ix : int64_t{-1});
          }
        }
      }
    }
  }
}

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CONV_TAPS_H_
