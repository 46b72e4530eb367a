// Inverted dropout: a mask of 0 and 1/(1-p) drawn from the caller's Generator, shared by forward and
// backward.
#include <memory>
#include <vector>

#include "tensor/device_guard.h"
#include "tensor/function_node.h"
#include "tensor/ops.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_ops.h"
#endif

namespace ddp {
namespace {

// Fills mask[0, n) with 0 (probability p) or `scale`. Each 64-bit draw gives two 24-bit uniforms in
// [0, 1) (the same resolution as Generator::Uniform); an element is kept when its uniform is >= p.
void DrawMask(float p, float scale, Generator& generator, float* mask, int64_t n) {
  constexpr float kUnit = 1.0f / 16777216.0f;
  int64_t i = 0;
  for (; i + 1 < n; i += 2) {
    const uint64_t bits = generator.Next();
    mask[i] = static_cast<float>(bits >> 40) * kUnit >= p ? scale : 0.0f;
    mask[i + 1] = static_cast<float>((bits >> 16) & 0xFFFFFF) * kUnit >= p ? scale : 0.0f;
  }
  if (i < n) mask[i] = static_cast<float>(generator.Next() >> 40) * kUnit >= p ? scale : 0.0f;
}

}  // namespace

Tensor Dropout(const Tensor& x, float p, bool training, Generator& generator) {
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) return cuda::Dropout(x, p, training, generator);
#endif
  RequireCpuFloat("Dropout", {&x});
  DDP_CHECK(p >= 0.0f && p <= 1.0f) << "Dropout: probability " << p << " is outside [0, 1]";
  if (!training || p == 0.0f) return x;
  const int64_t n = x.numel();
  Tensor mask = Tensor::Empty(x.shape(), DType::kFloat32, x.device());
  float* pm = mask.data<float>();
  if (p == 1.0f) {
    std::fill(pm, pm + n, 0.0f);  // no draws: every element is dropped
  } else {
    DrawMask(p, 1.0f / (1.0f - p), generator, pm, n);
  }
  Tensor xc = Contiguous(x.Detach());
  Tensor out = Tensor::Empty(x.shape(), DType::kFloat32, x.device());
  const float* px = xc.data<float>();
  float* po = out.data<float>();
  for (int64_t i = 0; i < n; ++i) po[i] = px[i] * pm[i];
  return RecordOp(out, "DropoutBackward", {&x}, [mask](const Tensor& g) {
    Tensor gc = Contiguous(g);
    Tensor gx = Tensor::Empty(mask.shape(), DType::kFloat32, g.device());
    const float* pg = gc.data<float>();
    const float* pm = mask.data<float>();
    float* po = gx.data<float>();
    for (int64_t i = 0; i < mask.numel(); ++i) po[i] = pg[i] * pm[i];
    return std::vector<Tensor>{gx};
  });
}

}  // namespace ddp
