// Conv2d on channels-last activations (contracts: tensor/conv_channels_last.h; Note [Channels-last
// convolutions] there).
#include "tensor/conv_channels_last.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "tensor/bf16_convert.h"
#include "tensor/conv_amx.h"
#include "tensor/conv_amx_grid_forward.h"
#include "tensor/conv_amx_input_gradient.h"
#include "tensor/conv_amx_weight_gradient.h"
#include "tensor/conv_forward_by_pixel_class.h"
#include "tensor/conv_onednn.h"
#include "tensor/conv_taps.h"
#include "tensor/conv_weight_gradient_by_tap.h"
#include "tensor/cpu_gemm.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/layout_transpose.h"
#include "tensor/thread_scratch.h"

namespace ddp {
namespace cpu {
namespace {

// Per-thread scratch, reused across calls: slot 0 the reordered weights, 1 the unfolded rows, 2 the bf16
// output gradient, 3 float32 rows (the weight gradient's or the input gradient's unfolding), 4-6 bf16
// operands widened to float32 (x, w, the output gradient).
// A slot holds float32 storage whichever element type asks for it, so the two precisions share it.
struct ChannelsLastScratch {};
template <typename T>
T* ScratchArray(int slot, int64_t elements) {
  const int64_t floats = (elements * static_cast<int64_t>(sizeof(T)) + 3) / 4;
  return reinterpret_cast<T*>(ThreadScratch<ChannelsLastScratch, float, 7>(slot, floats));
}

constexpr int64_t kRowGroupBytes = int64_t{2} << 20;  // unfolded rows per group, within L2

// Images per group of unfolded rows: as many as keep the rows within kRowGroupBytes, at least one.
int64_t ImagesPerRowGroup(const ConvGeometry& g, size_t element_size) {
  const int64_t image_bytes = std::max<int64_t>(g.P() * g.K() * static_cast<int64_t>(element_size), 1);
  return std::clamp<int64_t>(kRowGroupBytes / image_bytes, 1, std::max<int64_t>(g.n, 1));
}

// A 1x1 stride-1 unpadded convolution: its unfolded rows are the input's pixels themselves.
bool IsPointwise(const ConvGeometry& g) { return g.kh == 1 && g.kw == 1 && g.stride == 1 && g.padding == 0; }

ConvGeometry ChannelsLast(ConvGeometry g) {
  g.channels_last = true;
  return g;
}

bool Bf16Primitives() { return ActiveBf16GemmKernel() == Bf16GemmKernel::kOneDnn; }

// True when T's GEMMs run on AMX tiles (bf16 on oneDNN's AMX matmul; Note [Padding skips off AMX] in
// tensor/conv_weight_gradient_by_tap.h).
template <typename T>
bool GemmsOnAmx() {
  return std::is_same_v<T, BFloat16> && Bf16GemmsOnAmx();
}

// True when oneDNN's primitives take the pass (Note [Conv2d kernel choice]): for bf16 operands its bf16
// primitives where its GEMMs are oneDNN's, else its float32 ones on the operands widened (Note [bf16
// operands of oneDNN's convolutions]), as for NCHW activations.
bool OnPrimitives(const ConvGeometry& g) { return ConvKernelFor(g) != ConvKernel::kIm2Col; }

// v widened to float32 (exactly) in scratch `slot`, for oneDNN's float32 primitives.
const float* Widened(const BFloat16* v, int64_t elements, int slot) {
  float* wide = ScratchArray<float>(slot, elements);
  BFloat16ToFloatArray(v, wide, elements);
  return wide;
}

// out[o][t][ch] = w[o][ch][t] for tap t < kh*kw: weights [out, c, kh, kw] as [out, kh, kw, c], each
// output channel's [c, taps] matrix transposed in register tiles.
void WeightsTapsFirst(const float* w, const ConvGeometry& g, float* out) {
  Transpose32(w, g.out, g.c, g.kh * g.kw, out);
}
void WeightsTapsFirst(const BFloat16* w, const ConvGeometry& g, BFloat16* out) {
  Transpose16(w, g.out, g.c, g.kh * g.kw, out);
}

// The inverse of WeightsTapsFirst, for the float32 weight gradient.
void WeightsChannelsFirst(const float* taps_first, const ConvGeometry& g, float* w) {
  Transpose32(taps_first, g.out, g.kh * g.kw, g.c, w);
}

// rows [count * P, kh * kw * c] of images [first, first + count): row (i, oy, ox) holds, tap by tap, the c
// channels of the input pixel the tap reads (zeros in the padding). A kernel row (ky) whose kw taps all
// fall inside the image reads kw consecutive input pixels, so it is one copy of kw * c values.
template <typename T>
void UnfoldRows(const T* x, const ConvGeometry& g, int64_t first, int64_t count, T* rows) {
  const int64_t c = g.c, K = g.K(), run = g.kw * c;
#pragma omp parallel for if (count > 1 && count * g.P() * K > (int64_t{1} << 16))
  for (int64_t i = 0; i < count; ++i) {
    const T* image = x + (first + i) * g.h * g.w * c;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        T* row = rows + ((i * g.oh + oy) * g.ow + ox) * K;
        const int64_t ix0 = ox * g.stride - g.padding;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const int64_t iy = oy * g.stride - g.padding + ky;
          T* dst = row + ky * run;
          if (iy < 0 || iy >= g.h) {
            std::memset(static_cast<void*>(dst), 0, run * sizeof(T));
          } else if (ix0 >= 0 && ix0 + g.kw <= g.w) {
            std::memcpy(static_cast<void*>(dst), image + (iy * g.w + ix0) * c, run * sizeof(T));
          } else {
            for (int64_t kx = 0; kx < g.kw; ++kx) {
              const int64_t ix = ix0 + kx;
              if (ix < 0 || ix >= g.w) {
                std::memset(static_cast<void*>(dst + kx * c), 0, c * sizeof(T));
              } else {
                std::memcpy(static_cast<void*>(dst + kx * c), image + (iy * g.w + ix) * c, c * sizeof(T));
              }
            }
          }
        }
      }
    }
  }
}

// The adjoint of UnfoldRows: adds each row's taps into the input pixels they read (gx, NHWC). Within an
// image the taps of one pixel are added in row order; images are independent.
void FoldRows(const float* rows, const ConvGeometry& g, int64_t first, int64_t count, float* gx) {
  const int64_t c = g.c, K = g.K();
  ForEachTap(g, first, count, [&](int64_t row, int64_t tap, int64_t pixel) {
    if (pixel < 0) return;
    const float* src = rows + row * K + tap * c;
    float* dst = gx + pixel * c;
    for (int64_t ch = 0; ch < c; ++ch) dst[ch] += src[ch];
  });
}

template <typename T>
void Forward(const T* x, const T* w, const float* b, const ConvGeometry& g, float* y) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (OnPrimitives(g) && Bf16ConvOnFloat32Primitives(g) &&
        OneDnnConvForward(Widened(x, g.n * g.h * g.w * g.c, 4), Widened(w, g.out * g.K(), 5), b,
                          ChannelsLast(g), y)) {
      return;
    }
    if (OnPrimitives(g) && Bf16Primitives() && !Bf16ForwardOnIm2Col() &&
        OneDnnConvForward(x, w, b, ChannelsLast(g), y)) {
      return;
    }
    // Where the unfolded rows would go to oneDNN's AMX matmul, the same sums straight from the input
    // (Note [Channels-last forward on AMX tiles]), unless the grid kernel below is the faster.
    if (b == nullptr && Bf16GemmsOnAmx() && AmxForwardApplies(ChannelsLast(g)) &&
        !AmxGridForwardPreferred(ChannelsLast(g))) {
      AmxForwardChannelsLast(x, w, ChannelsLast(g), y);
      return;
    }
  } else {
    if (OnPrimitives(g) && OneDnnConvForward(x, w, b, ChannelsLast(g), y)) return;
  }
  const int64_t K = g.K(), P = g.P(), group = ImagesPerRowGroup(g, sizeof(T));
  T* weights = ScratchArray<T>(0, g.out * K);
  WeightsTapsFirst(w, g, weights);
  if (!IsPointwise(g) && ForwardByPixelClassApplies(g, GemmsOnAmx<T>())) {  // Note [Forward by pixel class]
    ForwardByPixelClass(x, weights, b, g, y);
    return;
  }
  int64_t computed = 0;  // leading images already computed, a whole number of groups
  if constexpr (std::is_same_v<T, BFloat16>) {
    // On small maps, the groups' sums straight from the input in the GEMMs' own order (Note [Channels-last
    // forward on AMX tiles along the padded grid]); a forced algorithm keeps the rows or the classes.
    if (b == nullptr && ForcedForwardAlgorithm() == ForwardAlgorithm::kAuto && Bf16GemmsOnAmx() &&
        AmxGridForwardComputes(ChannelsLast(g))) {
      computed = AmxGridForwardChannelsLast(x, weights, ChannelsLast(g), group, y);
      if (computed == g.n) return;
    }
  }
  T* rows = IsPointwise(g) ? nullptr : ScratchArray<T>(1, group * P * K);
  for (int64_t first = computed; first < g.n; first += group) {
    const int64_t count = std::min(group, g.n - first), m = count * P;
    float* out = y + first * P * g.out;
    if (b != nullptr) {
      for (int64_t r = 0; r < m; ++r) std::copy(b, b + g.out, out + r * g.out);
    }
    const T* a = x + first * P * g.c;
    if (rows != nullptr) {
      UnfoldRows(x, g, first, count, rows);
      a = rows;
    }
    Gemm(false, true, m, g.out, K, 1.0f, a, K, weights, K, b != nullptr ? 1.0f : 0.0f, out, g.out);
  }
}

// gb[o] = Σ gy[., o] over the rows of every image, image by image.
void BiasGradient(const float* gy, const ConvGeometry& g, float* gb) {
  std::fill(gb, gb + g.out, 0.0f);
  std::vector<float> image(g.out);
  for (int64_t i = 0; i < g.n; ++i) {
    std::fill(image.begin(), image.end(), 0.0f);
    for (int64_t p = 0; p < g.P(); ++p) {
      const float* row = gy + (i * g.P() + p) * g.out;
      for (int64_t o = 0; o < g.out; ++o) image[o] += row[o];
    }
    for (int64_t o = 0; o < g.out; ++o) gb[o] += image[o];
  }
}

// gw from the unfolded rows: gw[out, kh*kw*c] = Σ over groups gy_rows^T * rows, or tap by tap where
// Note [Weight gradients tap by tap] says so; then reordered to [out, c, kh, kw].
template <typename T>
void WeightGradient(const T* x, const T* gy, const ConvGeometry& g, float* gw) {
  const int64_t K = g.K(), P = g.P(), group = ImagesPerRowGroup(g, sizeof(T));
  float* taps_first = ScratchArray<float>(3, g.out * K);
  if (!IsPointwise(g) &&
      WeightGradientByTapApplies(g, GemmsOnAmx<T>())) {  // Note [Weight gradients tap by tap]
    WeightGradientByTap(x, gy, g, taps_first);
    WeightsChannelsFirst(taps_first, g, gw);
    return;
  }
  if constexpr (std::is_same_v<T, BFloat16>) {
    // The same sums without the rows on AMX tiles (Note [Channels-last weight gradients on AMX tiles]);
    // a forced algorithm (kRows: the rows themselves) takes precedence.
    if (ForcedWeightGradientAlgorithm() == WeightGradientAlgorithm::kAuto && Bf16GemmsOnAmx() &&
        AmxWeightGradientApplies(ChannelsLast(g), group)) {
      AmxWeightGradientChannelsLast(x, gy, ChannelsLast(g), group, gw);
      return;
    }
  }
  T* rows = IsPointwise(g) ? nullptr : ScratchArray<T>(1, group * P * K);
  if (g.n == 0) std::fill(taps_first, taps_first + g.out * K, 0.0f);
  for (int64_t first = 0; first < g.n; first += group) {
    const int64_t count = std::min(group, g.n - first), m = count * P;
    const T* b = x + first * P * g.c;
    if (rows != nullptr) {
      UnfoldRows(x, g, first, count, rows);
      b = rows;
    }
    Gemm(true, false, g.out, K, m, 1.0f, gy + first * P * g.out, g.out, b, K, first == 0 ? 0.0f : 1.0f,
         taps_first, K);
  }
  WeightsChannelsFirst(taps_first, g, gw);
}

// gx (NHWC) = the input gradient: the output gradient's rows times the weights, folded back onto the input.
template <typename T>
void InputGradient(const T* w, const T* gy, const ConvGeometry& g, float* gx) {
  const int64_t K = g.K(), P = g.P(), group = ImagesPerRowGroup(g, sizeof(float));
  T* weights = ScratchArray<T>(0, g.out * K);
  WeightsTapsFirst(w, g, weights);
  if (IsPointwise(g)) {
    Gemm(false, false, g.n * P, g.c, g.out, 1.0f, gy, g.out, weights, K, 0.0f, gx, g.c);
    return;
  }
  std::fill(gx, gx + g.n * g.h * g.w * g.c, 0.0f);
  float* rows = ScratchArray<float>(3, group * P * K);
  for (int64_t first = 0; first < g.n; first += group) {
    const int64_t count = std::min(group, g.n - first), m = count * P;
    Gemm(false, false, m, K, g.out, 1.0f, gy + first * P * g.out, g.out, weights, K, 0.0f, rows, K);
    FoldRows(rows, g, first, count, gx);
  }
}

// grads.gx and grads.gw, where wanted, through oneDNN's float32 backward primitives on the bf16 operands
// widened; returns `grads` with the ones computed set to null.
ConvGrads WidenedPrimitivePasses(const BFloat16* x, const BFloat16* w, const BFloat16* gy_low,
                                 const ConvGeometry& g, ConvGrads grads) {
  if (grads.gx == nullptr && grads.gw == nullptr) return grads;
  const float* wide_gy = Widened(gy_low, g.n * g.P() * g.out, 6);
  const float* wide_x = grads.gw != nullptr ? Widened(x, g.n * g.h * g.w * g.c, 4) : nullptr;
  const float* wide_w = grads.gx != nullptr ? Widened(w, g.out * g.K(), 5) : nullptr;
  if (OneDnnConvBackward(wide_x, wide_w, wide_gy, ChannelsLast(g), grads.gx, grads.gw)) {
    grads.gx = grads.gw = nullptr;
  }
  return grads;
}

// The wanted ones of grads.gx and grads.gw through oneDNN's float32 backward primitives on the bf16
// operands widened (gy_low: the output gradient already rounded to bf16), the weight gradient aside where
// Note [Float32 weight gradients on im2col without AVX-512] gives it to the unfolded rows; returns `grads`
// with the ones computed set to null.
ConvGrads WidenedPrimitiveBackward(const BFloat16* x, const BFloat16* w, const BFloat16* gy_low,
                                   const ConvGeometry& g, ConvGrads grads) {
  float* const rows_gw = Float32WeightGradientOnIm2Col(g) ? grads.gw : nullptr;
  if (rows_gw != nullptr) grads.gw = nullptr;
  grads = WidenedPrimitivePasses(x, w, gy_low, g, grads);
  if (rows_gw != nullptr) grads.gw = rows_gw;
  return grads;
}

// gy_low: gy rounded to bf16 where the caller has it (T = BFloat16; null: rounded here).
template <typename T>
void Backward(const T* x, const T* w, const float* gy, const T* gy_low, const ConvGeometry& g,
              ConvGrads grads) {
  if (grads.gb != nullptr) BiasGradient(gy, g, grads.gb);
  if (grads.gx == nullptr && grads.gw == nullptr) return;
  const T* operand = nullptr;  // gy as the products take it
  if constexpr (std::is_same_v<T, float>) {
    operand = gy;
  } else if (gy_low != nullptr) {
    operand = gy_low;
  } else {
    const int64_t elements = g.n * g.P() * g.out;
    T* rounded = ScratchArray<T>(2, elements);
    FloatToBFloat16Array(gy, rounded, elements);
    operand = rounded;
  }
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (OnPrimitives(g) && Bf16ConvOnFloat32Primitives(g) && g.n > 0) {
      grads = WidenedPrimitiveBackward(x, w, operand, g, grads);
      if (grads.gw != nullptr) WeightGradient(x, operand, g, grads.gw);
      if (grads.gx != nullptr) InputGradient(w, operand, g, grads.gx);
      return;
    }
  }
  if constexpr (std::is_same_v<T, BFloat16>) {
    // The primitive's input gradient, the same sums, on AMX tiles of our own where that is the faster (Note
    // [Channels-last input gradients on AMX tiles]).
    if (grads.gx != nullptr && g.n > 0 && OnPrimitives(g) && Bf16GemmsOnAmx() &&
        AmxInputGradientApplies(ChannelsLast(g))) {
      AmxInputGradientChannelsLast(w, operand, ChannelsLast(g), grads.gx);
      grads.gx = nullptr;
    }
  }
  if (OnPrimitives(g) && g.n > 0) {
    // Note [bf16 weight gradients on im2col] keeps a small bf16 weight gradient on the unfolded rows, Note
    // [Float32 weight gradients on im2col without AVX-512] a float32 one where oneDNN runs no AVX-512.
    bool rows_gw = false;
    if constexpr (std::is_same_v<T, BFloat16>) {
      rows_gw = Bf16WeightGradientOnIm2Col(g);
    } else {
      rows_gw = Float32WeightGradientOnIm2Col(g);
    }
    float* primitive_gw = rows_gw ? nullptr : grads.gw;
    if ((grads.gx != nullptr || primitive_gw != nullptr) &&
        OneDnnConvBackward(x, w, operand, ChannelsLast(g), grads.gx, primitive_gw)) {
      grads.gx = nullptr;
      if (!rows_gw) grads.gw = nullptr;
    }
  }
  if (grads.gw != nullptr) WeightGradient(x, operand, g, grads.gw);
  if (grads.gx != nullptr) InputGradient(w, operand, g, grads.gx);
}

}  // namespace

void ConvForwardChannelsLast(const float* x, const float* w, const float* b, const ConvGeometry& g,
                             float* y) {
  Forward(x, w, b, g, y);
}
void ConvForwardChannelsLast(const BFloat16* x, const BFloat16* w, const float* b, const ConvGeometry& g,
                             float* y) {
  Forward(x, w, b, g, y);
}
void ConvBackwardChannelsLast(const float* x, const float* w, const float* gy, const ConvGeometry& g,
                              ConvGrads grads) {
  Backward<float>(x, w, gy, nullptr, g, grads);
}
void ConvBackwardChannelsLast(const BFloat16* x, const BFloat16* w, const float* gy, const BFloat16* gy_low,
                              const ConvGeometry& g, ConvGrads grads) {
  Backward(x, w, gy, gy_low, g, grads);
}

}  // namespace cpu
}  // namespace ddp
