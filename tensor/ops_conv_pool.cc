// Conv2d, ReLU and MaxPool2d as one op on the CPU.
//
// Note [Conv2d, ReLU and MaxPool2d in one op]
// In a CNN's conv -> ReLU -> pool block the convolution's full-size output exists only to be pooled: the
// GEMMs write it, the pool reads it back from beyond L2 (the MNIST cnn's conv1 output is 6.4 MB at batch
// 64), and in backward the pool's gradient is scattered into a zero-filled tensor of that size that the
// convolution's GEMMs read back in turn. Conv2dReluMaxPool2d never makes it: forward pools each group of
// images (Note [Conv2d image groups]) with MaxPool2dOfRelu's kernel (Note [ReLU then MaxPool2d in one
// pass]) while the group's GEMM output is in cache, and keeps only the pooled values and the argmax
// indices; backward scatters each group's pooled gradient into a group-sized buffer that the
// convolution's backward GEMMs take as that group's output gradient (cpu::GroupGradientFn). The group's
// output is computed as Conv2d computes it, and the scattered gradient holds the same values in the
// layout Conv2d's backward gathers, so values and gradients are bit for bit those of the three ops
// (tensor/ops_conv_test.cc). Where the convolution runs through oneDNN's primitives (Note [Conv2d kernel
// choice]) the primitive computes the whole batch, which is then pooled image by image, and backward
// gathers the scattered gradient into one batch-sized array for the primitives: the savings above are then
// the pool's, not the convolution's. On CUDA it runs as the three ops.
#include <vector>

#include "tensor/autocast.h"
#include "tensor/conv_kernels.h"
#include "tensor/function_node.h"
#include "tensor/op_device.h"
#include "tensor/ops.h"
#include "tensor/pool_kernels.h"
#include "tensor/storage.h"

namespace ddp {
namespace {

// A group's planes are pooled or scattered by several threads above this many floats (as MaxPool2d).
constexpr int64_t kParallelFloats = int64_t{1} << 16;

// Pools each group's convolution output (adding the bias first where the GEMM did not) into y [n, out,
// pg.oh, pg.ow] and index.
cpu::GroupOutputFn PoolEachGroup(const float* b, const cpu::ConvGeometry& g, const cpu::PoolGeometry& pg,
                                 float* y, int32_t* index) {
  return [=](int64_t first, int64_t count, float* conv, int64_t ld, bool bias_added) {
    const int64_t P = g.P(), pooled = pg.oh * pg.ow;
#pragma omp parallel for collapse(2) if (count * g.out * P > kParallelFloats)
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t o = 0; o < g.out; ++o) {
        float* plane = conv + o * ld + i * P;
        if (!bias_added) {
          const float bias = b[o];
          for (int64_t p = 0; p < P; ++p) plane[p] = plane[p] + bias;
        }
        const int64_t at = ((first + i) * g.out + o) * pooled;
        cpu::MaxPoolPlane(plane, pg, /*relu=*/true, y + at, index + at);
      }
    }
  };
}

// The convolution's output gradient of each group, scattered from the pooled gradient gy [n, out, pg.oh,
// pg.ow] through the forward's argmax indices.
cpu::GroupGradientFn ScatterEachGroup(const float* gy, const int32_t* index, const cpu::ConvGeometry& g,
                                      const cpu::PoolGeometry& pg) {
  return [=](int64_t first, int64_t count, float* scratch) -> const float* {
    const int64_t P = g.P(), ld = count * P, pooled = pg.oh * pg.ow;
#pragma omp parallel for collapse(2) if (count * g.out * P > kParallelFloats)
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t o = 0; o < g.out; ++o) {
        const int64_t at = ((first + i) * g.out + o) * pooled;
        cpu::MaxPoolBackwardPlane(gy + at, index + at, pg, scratch + o * ld + i * P);
      }
    }
    return scratch;
  };
}

// The op with x and w as the GEMMs take them (xc, wc: contiguous, of element type T, no history).
template <typename T>
Tensor Fused(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& xc, const Tensor& wc,
             const cpu::ConvGeometry& g, const cpu::PoolGeometry& pg) {
  Tensor bc = b.defined() ? Contiguous(b.Detach()) : Tensor();
  Tensor out = Tensor::Empty({g.n, g.out, pg.oh, pg.ow}, DType::kFloat32, x.device());
  Storage index = NewStorage(static_cast<size_t>(out.numel()) * sizeof(int32_t), x.device());
  const float* pb = bc.defined() ? bc.data<float>() : nullptr;
  cpu::ConvForwardGroups(xc.data<T>(), wc.data<T>(), pb, g, /*direct=*/nullptr,
                         PoolEachGroup(pb, g, pg, out.data<float>(), static_cast<int32_t*>(index->data())));
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const bool need_b = b.defined() && b.requires_grad();
  return RecordOp(out, "Conv2dReluMaxPool2dBackward", {&x, &w, &b},
                  [xc, wc, g, pg, index, need_x, need_w, need_b](const Tensor& gy) {
                    const cpu::ConvGradTensors grads =
                        cpu::NewConvGrads(xc, wc, g, need_x, need_w, need_b, gy.device());
                    const Tensor gyc = Contiguous(gy);
                    const auto* argmax = static_cast<const int32_t*>(index->data());
                    cpu::ConvBackward(xc.data<T>(), wc.data<T>(), g,
                                      ScatterEachGroup(gyc.data<float>(), argmax, g, pg), grads.Pointers());
                    return std::vector<Tensor>{grads.gx, grads.gw, grads.gb};
                  });
}

}  // namespace

Tensor Conv2dReluMaxPool2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding,
                           int64_t pool_kernel, int64_t pool_stride) {
  RequireFloatOnOneDevice("Conv2dReluMaxPool2d", {&x, &w, &b});
  if (!x.device().is_cpu()) return MaxPool2d(Relu(Conv2d(x, w, b, stride, padding)), pool_kernel, pool_stride);
  const cpu::ConvGeometry g = cpu::CheckConvShapes(x, w, b, stride, padding);
  const cpu::PoolGeometry pg =
      cpu::CheckPoolShapes({g.n, g.out, g.oh, g.ow}, pool_kernel, pool_stride == 0 ? pool_kernel : pool_stride);
  // Under autocast (Note [Autocast]) x and w are bf16 and the GEMMs bf16 with float32 accumulation; the
  // pooling and its gradient are float32 either way.
  if (AutocastAppliesTo(x)) return Fused<BFloat16>(x, w, b, AutocastCast(x), AutocastCast(w), g, pg);
  // Note [fp16 autocast] in tensor/autocast.h. ReLU and max pooling move values without arithmetic, so
  // rounding the fused output's gradient rounds the convolution's (windows that overlap add gradients
  // in float32 here, where PyTorch adds them in float16).
  if (AutocastFp16AppliesTo(x)) {
    return AutocastFp16Call({x, w}, [&](const std::vector<Tensor>& r) {
      return Conv2dReluMaxPool2d(r[0], r[1], b, stride, padding, pool_kernel, pool_stride);
    });
  }
  return Fused<float>(x, w, b, Contiguous(x.Detach()), Contiguous(w.Detach()), g, pg);
}

}  // namespace ddp
