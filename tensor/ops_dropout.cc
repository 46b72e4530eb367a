// Inverted dropout, once for both devices: a mask of 0 and 1/(1-p) drawn from the caller's Generator,
// multiplied into the input in forward and into the gradient in backward. Only the mask's drawing branches
// on the device (tensor/cuda/cuda_ops.h says how the GPU's masks differ).
#include <algorithm>
#include <vector>

#include "tensor/elementwise_kernels.h"
#include "tensor/function_node.h"
#include "tensor/functors.h"
#include "tensor/op_device.h"
#include "tensor/ops.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/op_util.h"
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

// Fills contiguous `mask` with 0 (probability p) or 1/(1-p) on its device; p == 1 gives all zeros.
// REQUIRES: 0 < p <= 1.
void DrawMaskInto(const Tensor& mask, float p, Generator& generator) {
  const float scale = p == 1.0f ? 0.0f : 1.0f / (1.0f - p);
#ifdef DDP_WITH_CUDA
  if (mask.device().is_cuda()) {
    cuda::DeviceGuard guard(mask.device().index);
    DDP_CUDA_CHECK(cuda::kernels::DropoutMask(mask.data<float>(), mask.numel(), p, scale, generator.Next(),
                                              cuda::StreamOf(mask)));
    return;
  }
#endif
  float* pm = mask.data<float>();
  if (p == 1.0f) {
    std::fill(pm, pm + mask.numel(), 0.0f);  // no draws: every element is dropped
  } else {
    DrawMask(p, scale, generator, pm, mask.numel());
  }
}

}  // namespace

Tensor Dropout(const Tensor& x, float p, bool training, Generator& generator) {
  RequireFloatOnOneDevice("Dropout", {&x});
  DDP_CHECK(p >= 0.0f && p <= 1.0f) << "Dropout: probability " << p << " is outside [0, 1]";
  if (!training || p == 0.0f) return x;
  Tensor mask = Tensor::Empty(x.shape(), DType::kFloat32, x.device());
  DrawMaskInto(mask, p, generator);
  Tensor out = MapBinary(x, mask, x.shape(), functors::Mul());
  return RecordOp(out, "DropoutBackward", {&x}, [mask](const Tensor& g) {
    return std::vector<Tensor>{MapBinary(g, mask, mask.shape(), functors::Mul())};
  });
}

}  // namespace ddp
