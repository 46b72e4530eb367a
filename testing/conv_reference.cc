#include "testing/conv_reference.h"

#include <cstdint>

#include "base/check.h"

namespace ddp {

ConvReference DirectConvolution(const std::vector<float>& x, const std::vector<float>& w,
                                const std::vector<float>& gy, const cpu::ConvGeometry& g) {
  const int64_t taps = g.kh * g.kw;
  DDP_CHECK(static_cast<int64_t>(x.size()) == g.n * g.c * g.h * g.w &&
            static_cast<int64_t>(w.size()) == g.out * g.c * taps &&
            static_cast<int64_t>(gy.size()) == g.n * g.out * g.oh * g.ow)
      << "DirectConvolution: operand sizes do not fit the geometry";
  ConvReference r{std::vector<double>(gy.size()), std::vector<double>(x.size()),
                  std::vector<double>(w.size())};
  for (int64_t i = 0; i < g.n; ++i)
    for (int64_t o = 0; o < g.out; ++o)
      for (int64_t c = 0; c < g.c; ++c)
        for (int64_t tap = 0; tap < taps; ++tap) {
          const int64_t wi = (o * g.c + c) * taps + tap;
          double weight_sum = 0.0;
          for (int64_t r_out = 0; r_out < g.oh; ++r_out) {
            const int64_t row = r_out * g.stride + tap / g.kw - g.padding;
            if (row < 0 || row >= g.h) continue;
            for (int64_t s = 0; s < g.ow; ++s) {
              const int64_t col = s * g.stride + tap % g.kw - g.padding;
              if (col < 0 || col >= g.w) continue;
              const int64_t yi = ((i * g.out + o) * g.oh + r_out) * g.ow + s;
              const int64_t xi = ((i * g.c + c) * g.h + row) * g.w + col;
              r.y[yi] += double{x[xi]} * w[wi];
              r.gx[xi] += double{gy[yi]} * w[wi];
              weight_sum += double{gy[yi]} * x[xi];
            }
          }
          r.gw[wi] += weight_sum;
        }
  return r;
}

}  // namespace ddp
