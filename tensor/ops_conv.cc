// Conv2d on either device through im2col + one GEMM per group of images, and col2im for the input
// gradient. Checks, output allocation and autograd wiring are shared; the forward and backward kernels
// branch on the device (the CPU's in tensor/conv_kernels.cc, Note [Conv2d image groups], or oneDNN's
// primitives by shape, Note [Conv2d kernel choice]; the GPU's, with a
// GPU-sized group, in tensor/cuda/conv_im2col.cc; under autocast with 16-bit operands, Note [Autocast on
// CUDA] in tensor/autocast.h).
#include <vector>

#include "tensor/autocast.h"
#include "tensor/conv_channels_last.h"
#include "tensor/conv_kernels.h"
#include "tensor/function_node.h"
#include "tensor/memory_format.h"
#include "tensor/op_device.h"
#include "tensor/ops.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_ops.h"
#endif

namespace ddp {
namespace {

using cpu::ConvGeometry;

#ifdef DDP_WITH_CUDA
// The geometry as the CUDA kernels take it.
cuda::kernels::ConvShape ToKernelShape(const ConvGeometry& g) {
  return {g.n, g.c, g.h, g.w, g.out, g.kh, g.kw, g.stride, g.padding, g.oh, g.ow};
}
#endif

// y = conv(x, w) (+ b when defined) for contiguous operands on one device.
void ConvForwardOn(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g, const Tensor& y) {
#ifdef DDP_WITH_CUDA
  if (y.device().is_cuda()) {
    cuda::Conv2dForward(x, w, b, ToKernelShape(g), y);
    return;
  }
#endif
  cpu::ConvForward(x.data<float>(), w.data<float>(), b.defined() ? b.data<float>() : nullptr, g, y.data<float>());
}

// The defined ones of grads.gx, gw and gb (each overwritten; on a GPU gx arrives zero-filled and is
// accumulated into) from the contiguous output gradient gy, on gy's device.
void ConvBackwardOn(const Tensor& x, const Tensor& w, const Tensor& gy, const ConvGeometry& g,
                    const cpu::ConvGradTensors& grads) {
#ifdef DDP_WITH_CUDA
  if (gy.device().is_cuda()) {
    cuda::Conv2dBackward(x, w, gy, ToKernelShape(g), grads.gx, grads.gw, grads.gb);
    return;
  }
#endif
  cpu::ConvBackward(x.data<float>(), w.data<float>(), g, cpu::DenseGradient(gy.data<float>(), g),
                    grads.Pointers());
}

// Conv2d under autocast (Note [Autocast]): bf16 x and w, float32 output and gradients.
Tensor Conv2dBf16(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g) {
  Tensor xb = AutocastCast(x), wb = AutocastCast(w);
  Tensor bc = b.defined() ? Contiguous(b.Detach()) : Tensor();
  Tensor out = Tensor::Empty({g.n, g.out, g.oh, g.ow}, DType::kFloat32, x.device());
  cpu::ConvForward(xb.data<BFloat16>(), wb.data<BFloat16>(), bc.defined() ? bc.data<float>() : nullptr, g,
                   out.data<float>());
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const bool need_b = b.defined() && b.requires_grad();
  return RecordOp(out, "Conv2dBackward", {&x, &w, &b}, [xb, wb, g, need_x, need_w, need_b](const Tensor& gy) {
    const cpu::ConvGradTensors grads = cpu::NewConvGrads(xb, wb, g, need_x, need_w, need_b, gy.device());
    const Tensor gyc = Contiguous(gy);
    cpu::ConvBackward(xb.data<BFloat16>(), wb.data<BFloat16>(), g, cpu::DenseGradient(gyc.data<float>(), g),
                      grads.Pointers());
    return std::vector<Tensor>{grads.gx, grads.gw, grads.gb};
  });
}

// Conv2d of a channels-last CPU input (Note [Channels-last activations], tensor/conv_channels_last.h): the
// output and the input gradient channels-last too; under autocast with bf16 x and w (float32 output and
// gradients), as Conv2dBf16.
Tensor Conv2dChannelsLast(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g) {
  const bool bf16 = AutocastAppliesTo(x);
  const Tensor xo = bf16 ? AutocastCastChannelsLast(x) : x.Detach();
  const Tensor wo = bf16 ? AutocastCast(w) : Contiguous(w.Detach());
  const Tensor bc = b.defined() ? Contiguous(b.Detach()) : Tensor();
  const float* bias = bc.defined() ? bc.data<float>() : nullptr;
  Tensor out = EmptyChannelsLast({g.n, g.out, g.oh, g.ow}, DType::kFloat32);
  if (bf16) {
    cpu::ConvForwardChannelsLast(xo.data<BFloat16>(), wo.data<BFloat16>(), bias, g, out.data<float>());
  } else {
    cpu::ConvForwardChannelsLast(xo.data<float>(), wo.data<float>(), bias, g, out.data<float>());
  }
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const bool need_b = b.defined() && b.requires_grad();
  return RecordOp(out, "Conv2dBackward", {&x, &w, &b}, [xo, wo, g, need_x, need_w, need_b](const Tensor& gy) {
    cpu::ConvGradTensors grads = cpu::NewConvGrads(xo, wo, g, /*need_x=*/false, need_w, need_b, gy.device());
    if (need_x) grads.gx = EmptyChannelsLast(xo.shape(), DType::kFloat32);
    const Tensor gyc = ChannelsLastCopy(gy.Detach());
    if (xo.dtype() == DType::kBFloat16) {
      // Note [bf16 copies of BatchNorm's input gradient]: gy's bf16 copy where its producer attached one.
      const Tensor gy_copy = AttachedGradientCopy(gy);
      cpu::ConvBackwardChannelsLast(xo.data<BFloat16>(), wo.data<BFloat16>(), gyc.data<float>(),
                                    gy_copy.defined() ? gy_copy.data<BFloat16>() : nullptr, g,
                                    grads.Pointers());
    } else {
      cpu::ConvBackwardChannelsLast(xo.data<float>(), wo.data<float>(), gyc.data<float>(), g,
                                    grads.Pointers());
    }
    return std::vector<Tensor>{grads.gx, grads.gw, grads.gb};
  });
}

#ifdef DDP_WITH_CUDA
// Conv2d under autocast on CUDA (Note [Autocast on CUDA]): 16-bit x and w, float32 output and gradients.
Tensor Conv2dLowPrecisionCuda(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g) {
  Tensor xl = AutocastCast(x), wl = AutocastCast(w);
  Tensor bc = b.defined() ? Contiguous(b.Detach()) : Tensor();
  Tensor out = Tensor::Empty({g.n, g.out, g.oh, g.ow}, DType::kFloat32, x.device());
  cuda::Conv2dForwardLowPrecision(xl, wl, bc, ToKernelShape(g), out);
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const bool need_b = b.defined() && b.requires_grad();
  return RecordOp(out, "Conv2dBackward", {&x, &w, &b}, [xl, wl, g, need_x, need_w, need_b](const Tensor& gy) {
    const cpu::ConvGradTensors grads = cpu::NewConvGrads(xl, wl, g, need_x, need_w, need_b, gy.device());
    // fp16 sees the rounded output gradient everywhere, the bias gradient included, as on the CPU.
    const Tensor gyc = xl.dtype() == DType::kFloat16 ? ToDType(ToLowPrecisionContiguous(gy, DType::kFloat16),
                                                               DType::kFloat32)
                                                      : Contiguous(gy);
    cuda::Conv2dBackwardLowPrecision(xl, wl, gyc, ToKernelShape(g), grads.gx, grads.gw, grads.gb);
    return std::vector<Tensor>{grads.gx, grads.gw, grads.gb};
  });
}
#endif

}  // namespace

Tensor Conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding) {
  RequireFloatOnOneDevice("Conv2d", {&x, &w, &b});
  const ConvGeometry g = cpu::CheckConvShapes(x, w, b, stride, padding);
  if (x.device().is_cpu() && HasChannelsLastStrides(x) && !AutocastFp16AppliesTo(x)) {
    return Conv2dChannelsLast(x, w, b, g);
  }
  if (AutocastAppliesTo(x)) return Conv2dBf16(x, w, b, g);
#ifdef DDP_WITH_CUDA
  if (AutocastCudaAppliesTo(x)) return Conv2dLowPrecisionCuda(x, w, b, g);
#endif
  if (AutocastFp16AppliesTo(x)) {  // Note [fp16 autocast] in tensor/autocast.h
    return AutocastFp16Call({x, w}, [&](const std::vector<Tensor>& r) { return Conv2d(r[0], r[1], b, stride, padding); });
  }
  Tensor xc = Contiguous(x.Detach()), wc = Contiguous(w.Detach());
  Tensor bc = b.defined() ? Contiguous(b.Detach()) : Tensor();
  Tensor out = Tensor::Empty({g.n, g.out, g.oh, g.ow}, DType::kFloat32, x.device());
  ConvForwardOn(xc, wc, bc, g, out);
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const bool need_b = b.defined() && b.requires_grad();
  return RecordOp(out, "Conv2dBackward", {&x, &w, &b}, [xc, wc, g, need_x, need_w, need_b](const Tensor& gy) {
    const cpu::ConvGradTensors grads = cpu::NewConvGrads(xc, wc, g, need_x, need_w, need_b, gy.device());
    ConvBackwardOn(xc, wc, Contiguous(gy), g, grads);
    return std::vector<Tensor>{grads.gx, grads.gw, grads.gb};
  });
}

}  // namespace ddp
