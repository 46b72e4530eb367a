#include "tensor/conv_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "base/check.h"
#include "tensor/bf16_convert.h"
#include "tensor/conv_onednn.h"
#include "tensor/cpu_gemm.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/im2col.h"
#include "tensor/ops.h"

namespace ddp {
namespace cpu {
namespace {

// Scratch buffers up to this many floats are cached per thread (class Scratch); larger ones are allocated
// per call.
constexpr size_t kMaxCachedFloats = size_t{4} << 20;  // 16 MiB per slot and thread

// Scratch memory for col buffers: a per-thread buffer (slots: 0 col, 1 group output or gradient, 2 bf16
// gradient, 3-5 float32 copies of bf16 operands for oneDNN) reused across calls (so steady-state training
// does not page-fault on fresh allocations), or a one-off allocation above kMaxCachedFloats.
class Scratch {
 public:
  Scratch(int slot, size_t floats) {
    thread_local std::vector<float> cached[6];
    if (floats > kMaxCachedFloats) {
      own_.resize(floats);
      data_ = own_.data();
      return;
    }
    if (cached[slot].size() < floats) cached[slot].resize(floats);
    data_ = cached[slot].data();
  }
  float* data() { return data_; }
  // The buffer as an array of T (float, or BFloat16 for mixed precision's bf16 operands).
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(data_);
  }

 private:
  std::vector<float> own_;
  float* data_;
};

// The sum of one output plane's P gradients (the bias gradient's share of one image and channel).
float SumPlane(const float* src, int64_t P) {
  float total = 0.0f;
#pragma omp simd reduction(+ : total)
  for (int64_t p = 0; p < P; ++p) total += src[p];  // vectorised: lanes summed at the end
  return total;
}

}  // namespace

// Images per GEMM (Note [Conv2d image groups]): enough to give the GEMM N >= ~800 columns while keeping
// col within a budget of 1 MiB, or of the weight matrix's size where that is larger (within the cached
// scratch). Measured on the MNIST CNN at batch 64, 1 thread (tensor/conv_bench.cc): conv2 (P = 196) is
// fastest with 4 images per GEMM, conv1 (P = 784) with one; larger groups lose more to the
// scatter/gather copies and cache misses than the wider GEMM gains. Weights beyond L2 (ResNet-18's
// later stages: 512 x 4608 floats, 9 MiB, at P = 16) change the balance: every group streams them
// through the GEMM again, and backward reads and writes the whole weight gradient once per group, so
// a col as large as the weights costs less than the extra weight passes it saves.
int64_t ImagesPerGroup(const ConvGeometry& g) {
  const int64_t p = std::max<int64_t>(g.P(), 1);
  const int64_t want_n = 800;
  const int64_t budget_floats = std::min<int64_t>(std::max<int64_t>((1 << 20) / sizeof(float), g.out * g.K()),
                                                  static_cast<int64_t>(kMaxCachedFloats));
  int64_t group = std::max<int64_t>(1, want_n / p);
  group = std::min(group, std::max<int64_t>(1, budget_floats / std::max<int64_t>(g.K() * p, 1)));
  return std::min(group, std::max<int64_t>(g.n, 1));
}

ConvGeometry CheckConvShapes(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride,
                             int64_t padding) {
  DDP_CHECK(x.dim() == 4 && w.dim() == 4 && x.shape()[1] == w.shape()[1])
      << "Conv2d: input " << ShapeToString(x.shape()) << " [n, c, h, w] does not match weight "
      << ShapeToString(w.shape()) << " [out, c, kh, kw]";
  DDP_CHECK(stride >= 1 && padding >= 0)
      << "Conv2d: stride " << stride << " must be >= 1 and padding " << padding << " >= 0";
  ConvGeometry g{x.shape()[0],
                 x.shape()[1],
                 x.shape()[2],
                 x.shape()[3],
                 w.shape()[0],
                 w.shape()[2],
                 w.shape()[3],
                 stride,
                 padding,
                 0,
                 0};
  DDP_CHECK(g.kh >= 1 && g.kw >= 1 && g.h + 2 * padding >= g.kh && g.w + 2 * padding >= g.kw)
      << "Conv2d: kernel " << g.kh << "x" << g.kw << " larger than padded input " << ShapeToString(x.shape())
      << " with padding " << padding;
  if (b.defined()) {
    DDP_CHECK(b.dim() == 1 && b.shape()[0] == g.out)
        << "Conv2d: bias " << ShapeToString(b.shape()) << " for weight " << ShapeToString(w.shape());
  }
  g.oh = (g.h + 2 * padding - g.kh) / stride + 1;
  g.ow = (g.w + 2 * padding - g.kw) / stride + 1;
  return g;
}

namespace {

// Floats of scratch that hold `elements` values of T.
template <typename T>
size_t FloatsFor(int64_t elements) {
  return (static_cast<size_t>(elements) * sizeof(T) + sizeof(float) - 1) / sizeof(float);
}

// Note [bf16 operands of oneDNN's convolutions]
// Under autocast the operands are bf16 and the sums float32. oneDNN 2.6's bf16 convolutions run where
// the bf16 GEMMs are oneDNN's (tensor/cpu_gemm_bf16.h, Note [bf16 GEMM kernel choice]: AMX, AVX512_BF16
// where oneDNN's bf16 matmul measured faster, or DDP_BF16_GEMM=onednn); elsewhere the bf16 values are
// widened to float32 (exact) and the float32 primitives multiply them. The convolutions follow the
// matmul: on an AVX512_BF16 Xeon without AMX, oneDNN's bf16 convolution measured 1.3-1.6x slower than its
// float32 one at ResNet-18's shapes (tensor/conv_bench.cc), as its bf16 matmul is slower than sgemm
// there; on an AMD EPYC of family 26 both run faster in bf16. Bf16ConvOnFloat32Primitives
// (tensor/conv_onednn.h) says which a convolution takes.

// A bf16 array widened to float32 in scratch `slot`.
const float* Widened(const BFloat16* v, int64_t elements, int slot, std::optional<Scratch>& scratch) {
  scratch.emplace(slot, static_cast<size_t>(elements));
  BFloat16ToFloatArray(v, scratch->data(), elements);
  return scratch->data();
}

bool OneDnnForward(const float* x, const float* w, const float* b, const ConvGeometry& g, float* y) {
  return OneDnnConvForward(x, w, b, g, y);
}

bool OneDnnForward(const BFloat16* x, const BFloat16* w, const float* b, const ConvGeometry& g, float* y) {
  if (!Bf16ConvOnFloat32Primitives(g)) return OneDnnConvForward(x, w, b, g, y);
  std::optional<Scratch> wx, ww;
  return OneDnnConvForward(Widened(x, g.n * g.c * g.h * g.w, 3, wx), Widened(w, g.out * g.K(), 4, ww), b, g,
                           y);
}

// The whole batch through oneDNN's forward primitive (Note [Conv2d kernel choice]) into `direct` or
// scratch, handed to `consume` one image at a time; false when oneDNN has no kernel for the case.
template <typename T>
bool OneDnnForwardImages(const T* x, const T* w, const float* b, const ConvGeometry& g, float* direct,
                         const GroupOutputFn& consume) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    // Note [bf16 forward on im2col]
    if (!Bf16ConvOnFloat32Primitives(g) && Bf16ForwardOnIm2Col()) return false;
  }
  const int64_t image = g.out * g.P();
  Scratch full(1, direct == nullptr ? static_cast<size_t>(g.n * image) : 0);
  float* y = direct != nullptr ? direct : full.data();
  if (!OneDnnForward(x, w, b, g, y)) return false;
  for (int64_t i = 0; i < g.n; ++i) consume(i, 1, y + i * image, g.P(), /*bias_added=*/true);
  return true;
}

// ConvForwardGroups for float or BFloat16 operands (the GEMM overload of cpu_gemm.h or cpu_gemm_bf16.h).
template <typename T>
void ForwardGroups(const T* x, const T* w, const float* b, const ConvGeometry& g, float* direct,
                   const GroupOutputFn& consume) {
  if (ConvKernelFor(g) != ConvKernel::kIm2Col && OneDnnForwardImages(x, w, b, g, direct, consume)) return;
  const int64_t K = g.K(), P = g.P(), group = ImagesPerGroup(g);
  Scratch col_scratch(0, FloatsFor<T>(K * P * group));
  T* col = col_scratch.as<T>();
  Scratch tmp(1, group > 1 || direct == nullptr ? static_cast<size_t>(g.out * P * group) : 0);
  for (int64_t first = 0; first < g.n; first += group) {
    const int64_t count = std::min(group, g.n - first), ld = count * P;
    Im2ColGroup(x, g, first, count, col);
    if (group == 1) {
      float* out = direct != nullptr ? direct + first * g.out * P : tmp.data();
      if (b != nullptr) {
        for (int64_t o = 0; o < g.out; ++o) std::fill(out + o * P, out + (o + 1) * P, b[o]);
      }
      Gemm(false, false, g.out, P, K, 1.0f, w, K, col, P, b != nullptr ? 1.0f : 0.0f, out, P);
      consume(first, count, out, ld, /*bias_added=*/true);
      continue;
    }
    Gemm(false, false, g.out, ld, K, 1.0f, w, K, col, ld, 0.0f, tmp.data(), ld);
    consume(first, count, tmp.data(), ld, /*bias_added=*/b == nullptr);
  }
}

template <typename T>
void Forward(const T* x, const T* w, const float* b, const ConvGeometry& g, float* y) {
  const int64_t P = g.P();
  ForwardGroups(x, w, b, g, y, [&](int64_t first, int64_t count, float* out, int64_t ld, bool bias_added) {
    if (out == y + first * g.out * P) return;
#pragma omp parallel for collapse(2) if (count > 1)
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t o = 0; o < g.out; ++o) {
        const float* src = out + o * ld + i * P;
        float* dst = y + ((first + i) * g.out + o) * P;
        const float bias = bias_added ? 0.0f : b[o];
        for (int64_t p = 0; p < P; ++p) dst[p] = src[p] + bias;
      }
    }
  });
}

}  // namespace

void ConvForwardGroups(const float* x, const float* w, const float* b, const ConvGeometry& g, float* direct,
                       const GroupOutputFn& consume) {
  ForwardGroups(x, w, b, g, direct, consume);
}

void ConvForwardGroups(const BFloat16* x, const BFloat16* w, const float* b, const ConvGeometry& g,
                       float* direct, const GroupOutputFn& consume) {
  ForwardGroups(x, w, b, g, direct, consume);
}

void ConvForward(const float* x, const float* w, const float* b, const ConvGeometry& g, float* y) {
  Forward(x, w, b, g, y);
}

void ConvForward(const BFloat16* x, const BFloat16* w, const float* b, const ConvGeometry& g, float* y) {
  Forward(x, w, b, g, y);
}

ConvGrads ConvGradTensors::Pointers() const {
  auto pointer = [](const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; };
  return {pointer(gx), pointer(gw), pointer(gb)};
}

ConvGradTensors NewConvGrads(const Tensor& x, const Tensor& w, const ConvGeometry& g, bool need_x,
                             bool need_w, bool need_b, Device device) {
  ConvGradTensors grads;
  if (need_x) {
    grads.gx = Tensor::Empty(x.shape(), DType::kFloat32, device);
    if (device.is_cuda()) FillInPlace(grads.gx, 0.0f);  // the CUDA col2im accumulates into it
  }
  if (need_w) grads.gw = Tensor::Empty(w.shape(), DType::kFloat32, device);
  if (need_b) grads.gb = Tensor::Empty({g.out}, DType::kFloat32, device);
  return grads;
}

GroupGradientFn DenseGradient(const float* gy, const ConvGeometry& g) {
  return [gy, g](int64_t first, int64_t count, float* scratch) -> const float* {
    const int64_t P = g.P(), ld = count * P;
    if (count == 1) return gy + first * g.out * P;
#pragma omp parallel for collapse(2) if (count > 1)
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t o = 0; o < g.out; ++o) {
        std::memcpy(scratch + o * ld + i * P, gy + ((first + i) * g.out + o) * P, P * sizeof(float));
      }
    }
    return scratch;
  };
}

namespace {

// The output gradient [g.out, count * P] as the GEMMs' operand: itself for float, else rounded to bf16 in
// `scratch`.
template <typename T>
const T* GradientOperand(const float* gcol, int64_t elements, Scratch& scratch) {
  if constexpr (std::is_same_v<T, float>) {
    return gcol;
  } else {
    FloatToBFloat16Array(gcol, scratch.as<T>(), elements);
    return scratch.as<T>();
  }
}

// The output gradient of the whole batch as one [n, out, P] array: where `gradient` hands out consecutive
// images' gradients in place (DenseGradient) that array itself, else the images gathered into `dense`.
const float* WholeBatchGradient(const GroupGradientFn& gradient, const ConvGeometry& g, Scratch& dense) {
  const int64_t image = g.out * g.P();
  std::vector<const float*> parts(g.n);
  for (int64_t i = 0; i < g.n; ++i) parts[i] = gradient(i, 1, dense.data() + i * image);
  bool consecutive = true;
  for (int64_t i = 1; i < g.n && consecutive; ++i) consecutive = parts[i] == parts[0] + i * image;
  if (consecutive) return parts[0];
  for (int64_t i = 0; i < g.n; ++i) {
    if (parts[i] != dense.data() + i * image)
      std::memcpy(dense.data() + i * image, parts[i], image * sizeof(float));
  }
  return dense.data();
}

// grads.gx and grads.gw through oneDNN's backward primitives (both from one reordered gy where they can,
// else each alone); returns `grads` with the ones computed set to null.
template <typename T>
ConvGrads OneDnnBackwardPasses(const T* x, const T* w, const T* gy, const ConvGeometry& g, ConvGrads grads) {
  if (OneDnnConvBackward(x, w, gy, g, grads.gx, grads.gw)) {
    grads.gx = grads.gw = nullptr;
    return grads;
  }
  if (grads.gx != nullptr && OneDnnConvBackwardData(w, gy, g, grads.gx)) grads.gx = nullptr;
  if (grads.gw != nullptr && OneDnnConvBackwardWeights(x, gy, g, grads.gw, nullptr)) grads.gw = nullptr;
  return grads;
}

// The geometry of the forward convolution that computes g's input gradient (Note [bf16 input gradients
// as a forward convolution]): gy [n, out, oh, ow] in, gx [n, c, h, w] out. REQUIRES: g.stride == 1,
// g.kh == g.kw, g.padding < g.kh.
ConvGeometry InputGradientGeometry(const ConvGeometry& g) {
  return ConvGeometry{g.n, g.out, g.oh, g.ow, g.c, g.kh, g.kw, 1, g.kh - 1 - g.padding, g.h, g.w};
}

// w [out, c, k, k] transposed and flipped: flipped[ci][o][t] = w[o][ci][k * k - 1 - t] for tap t (a
// square kernel flipped in both dimensions reverses its taps' order).
void TransposeFlipWeights(const BFloat16* w, const ConvGeometry& g, BFloat16* flipped) {
  const int64_t taps = g.kh * g.kw;
#pragma omp parallel for if (g.c * g.out * taps > (int64_t{1} << 16))
  for (int64_t ci = 0; ci < g.c; ++ci) {
    for (int64_t o = 0; o < g.out; ++o) {
      const BFloat16* src = w + (o * g.c + ci) * taps;
      BFloat16* dst = flipped + (ci * g.out + o) * taps;
      for (int64_t t = 0; t < taps; ++t) dst[t] = src[taps - 1 - t];
    }
  }
}

// gx = the input gradient of g's convolution, computed as Note [bf16 input gradients as a forward
// convolution] says from the float32 output gradient gy of the whole batch (rounded to bf16 here).
void InputGradientAsForward(const BFloat16* w, const float* gy, const ConvGeometry& g, float* gx) {
  const int64_t elements = g.n * g.out * g.P();
  Scratch low(2, FloatsFor<BFloat16>(elements));
  const BFloat16* gy_low = GradientOperand<BFloat16>(gy, elements, low);
  Scratch flipped(3, FloatsFor<BFloat16>(g.out * g.K()));
  TransposeFlipWeights(w, g, flipped.as<BFloat16>());
  Forward(gy_low, flipped.as<BFloat16>(), nullptr, InputGradientGeometry(g), gx);
}

// The input and weight gradients of `grads` that oneDNN's bf16 primitives compute from the whole batch's
// float32 output gradient gy, which they take rounded to bf16 (in their layout in one pass where they can);
// a weight gradient that Note [bf16 weight gradients on im2col] gives to im2col is left to the caller's
// loop, and an input gradient that Note [bf16 input gradients as a forward convolution] gives to the
// forward convolution is computed here after the primitives (which may read gy from slots the forward
// reuses). Returns the gradients still to compute.
ConvGrads Bf16PrimitiveBackward(const BFloat16* x, const BFloat16* w, const float* gy, const ConvGeometry& g,
                                ConvGrads grads) {
  float* const im2col_gw = Bf16WeightGradientOnIm2Col(g) ? grads.gw : nullptr;
  if (im2col_gw != nullptr) grads.gw = nullptr;
  float* const forward_gx = grads.gx != nullptr && Bf16InputGradientAsForward(g) ? grads.gx : nullptr;
  if (forward_gx != nullptr) grads.gx = nullptr;
  if ((grads.gx != nullptr || grads.gw != nullptr) &&
      OneDnnConvBackwardRoundingGradient(x, w, gy, g, grads.gx, grads.gw)) {
    grads.gx = grads.gw = nullptr;
  } else if (grads.gx != nullptr || grads.gw != nullptr) {
    const int64_t elements = g.n * g.out * g.P();
    Scratch low(2, FloatsFor<BFloat16>(elements));
    grads = OneDnnBackwardPasses(x, w, GradientOperand<BFloat16>(gy, elements, low), g, grads);
  }
  if (forward_gx != nullptr) InputGradientAsForward(w, gy, g, forward_gx);
  if (im2col_gw != nullptr) grads.gw = im2col_gw;
  return grads;
}

// The gradients of `grads` that oneDNN's backward primitives compute (Note [Conv2d kernel choice]), from
// the whole batch's output gradient; the bias gradient is summed here as the im2col kernel sums it (same
// order, same numbers). Returns the gradients still to compute (those oneDNN has no kernel for).
template <typename T>
ConvGrads OneDnnBackward(const T* x, const T* w, const ConvGeometry& g, const GroupGradientFn& gradient,
                         ConvGrads grads) {
  const int64_t P = g.P(), image = g.out * P;
  Scratch dense(1, static_cast<size_t>(g.n * image));
  const float* gy = WholeBatchGradient(gradient, g, dense);
  if (grads.gb != nullptr) {
    std::fill(grads.gb, grads.gb + g.out, 0.0f);
    for (int64_t i = 0; i < g.n; ++i) {
      for (int64_t o = 0; o < g.out; ++o) grads.gb[o] += SumPlane(gy + i * image + o * P, P);
    }
    grads.gb = nullptr;
  }
  if (grads.gx == nullptr && grads.gw == nullptr) return grads;
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (!Bf16ConvOnFloat32Primitives(g)) return Bf16PrimitiveBackward(x, w, gy, g, grads);
  }
  // Note [Float32 weight gradients on im2col without AVX-512]: left to the caller's im2col loop.
  float* const im2col_gw = Float32WeightGradientOnIm2Col(g) ? grads.gw : nullptr;
  if (im2col_gw != nullptr) grads.gw = nullptr;
  if (grads.gx != nullptr || grads.gw != nullptr) {
    if constexpr (std::is_same_v<T, float>) {
      grads = OneDnnBackwardPasses(x, w, gy, g, grads);
    } else {
      // Note [bf16 operands of oneDNN's convolutions]; the output gradient is rounded to bf16 as im2col's.
      Scratch low(2, FloatsFor<T>(g.n * image));
      const T* gop = GradientOperand<T>(gy, g.n * image, low);
      std::optional<Scratch> wide_gy, wide_x, wide_w;
      const float* gyr = Widened(gop, g.n * image, 5, wide_gy);
      const float* wx = grads.gw != nullptr ? Widened(x, g.n * g.c * g.h * g.w, 3, wide_x) : nullptr;
      const float* ww = grads.gx != nullptr ? Widened(w, g.out * g.K(), 4, wide_w) : nullptr;
      grads = OneDnnBackwardPasses(wx, ww, gyr, g, grads);
    }
  }
  if (im2col_gw != nullptr) grads.gw = im2col_gw;
  return grads;
}

template <typename T>
void Backward(const T* x, const T* w, const ConvGeometry& g, const GroupGradientFn& gradient,
              ConvGrads grads) {
  if (ConvKernelFor(g) != ConvKernel::kIm2Col && g.n > 0 && (grads.gx != nullptr || grads.gw != nullptr)) {
    grads = OneDnnBackward(x, w, g, gradient, grads);
  }
  const int64_t K = g.K(), P = g.P(), group = ImagesPerGroup(g);
  if (grads.gx != nullptr) std::fill(grads.gx, grads.gx + g.n * g.c * g.h * g.w, 0.0f);  // col2im accumulates
  if (grads.gb != nullptr) std::fill(grads.gb, grads.gb + g.out, 0.0f);
  if (grads.gw != nullptr && g.n == 0) std::fill(grads.gw, grads.gw + g.out * K, 0.0f);
  if (grads.gx == nullptr && grads.gw == nullptr && grads.gb == nullptr) return;
  Scratch col(0, grads.gx != nullptr || grads.gw != nullptr ? static_cast<size_t>(K * P * group) : 0);
  Scratch scratch(1, static_cast<size_t>(g.out * P * group));
  Scratch low(2, std::is_same_v<T, float> ? 0 : FloatsFor<T>(g.out * P * group));
  for (int64_t first = 0; first < g.n; first += group) {
    const int64_t count = std::min(group, g.n - first), ld = count * P;
    const float* gcol = gradient(first, count, scratch.data());  // [out, ld]
    const T* gop =
        grads.gw != nullptr || grads.gx != nullptr ? GradientOperand<T>(gcol, g.out * ld, low) : nullptr;
    if (grads.gb != nullptr) {
      for (int64_t i = 0; i < count; ++i) {
        for (int64_t o = 0; o < g.out; ++o) grads.gb[o] += SumPlane(gcol + o * ld + i * P, P);
      }
    }
    if (grads.gw != nullptr) {
      Im2ColGroup(x, g, first, count, col.as<T>());
      Gemm(false, true, g.out, K, ld, 1.0f, gop, ld, col.as<T>(), ld, first == 0 ? 0.0f : 1.0f, grads.gw, K);
    }
    if (grads.gx != nullptr) {
      Gemm(true, false, K, ld, g.out, 1.0f, w, K, gop, ld, 0.0f, col.data(), ld);
      Col2ImGroup(col.data(), g, first, count, grads.gx);
    }
  }
}

}  // namespace

void ConvBackward(const float* x, const float* w, const ConvGeometry& g, const GroupGradientFn& gradient,
                  ConvGrads grads) {
  Backward(x, w, g, gradient, grads);
}

void ConvBackward(const BFloat16* x, const BFloat16* w, const ConvGeometry& g,
                  const GroupGradientFn& gradient, ConvGrads grads) {
  Backward(x, w, g, gradient, grads);
}

}  // namespace cpu
}  // namespace ddp
