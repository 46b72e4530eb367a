// The CUDA backend's entry points that are more than one kernel launch: copies between devices and dtypes,
// moving a model's tensors to a GPU, the optimizers' steps, and Conv2d's im2col + cuBLAS kernels. The ops of
// tensor/ops.h exist once for both devices (tensor/ops_*.cc); where their kernel calls branch on the device,
// the CUDA side is one of these, an element-wise launcher (tensor/elementwise_kernels.h) or a raw launcher of
// tensor/cuda/kernels.h. Kernels run on the current stream (Note [Current stream], tensor/cuda/context.h).
// Only built with --config=cuda.
//
// Where the CUDA ops' results differ from the CPU's, by design:
//   * NllLoss / CrossEntropy with CUDA targets do not check labels on the host (that would synchronise
//     every step): an out-of-range label makes the loss NaN.
//   * Dropout draws its mask from a counter-based hash seeded by one generator.Next() draw, so masks
//     differ from the CPU's for the same seed (the distribution is the same).
#ifndef DDP_TENSOR_CUDA_CUDA_OPS_H_
#define DDP_TENSOR_CUDA_CUDA_OPS_H_

#include "tensor/cuda/kernels.h"
#include "tensor/functors.h"
#include "tensor/tensor.h"

namespace ddp {
namespace cuda {

// dst = src for any combination of CPU and CUDA devices and dtypes (at least one side on CUDA).
// REQUIRES: equal element counts (ddp::CopyInPlace checks them).
void CopyInPlace(const Tensor& dst, const Tensor& src);

// One SGD step (nn/sgd.cc) over contiguous float32 tensors of one GPU, all of one size; `buf` may be
// undefined when step.momentum == 0.
void SgdStep(const Tensor& param, const Tensor& buf, const Tensor& grad, const functors::SgdStep& step);
// One Adam / AdamW step (nn/adam.cc) over contiguous float32 tensors of one GPU, all of one size.
void AdamStep(const Tensor& param, const Tensor& m, const Tensor& v, const Tensor& grad,
              const functors::AdamStep& step);

// Moves a tensor's data to `device` in place: the same TensorImpl (so parameter handles, names and
// hooks stay valid) now points at a contiguous copy on `device`. For building a model on the CPU and
// moving it (torch's module.to(device)). REQUIRES: no gradient yet.
void MoveToDeviceInPlace(const Tensor& t, Device device);

// ---- kernels of ops implemented once for both devices in tensor/ops_*.cc ----
// The op has checked shapes and devices; these only run kernels, on contiguous float32 tensors of one
// GPU, and record no autograd.

// Conv2d's forward (tensor/ops_conv.cc): y [n, out, oh, ow] = conv(x [n, c, h, w], w [out, c, kh, kw])
// (+ b [out] when defined), geometry `g`.
void Conv2dForward(const Tensor& x, const Tensor& w, const Tensor& b, const kernels::ConvShape& g, const Tensor& y);
// Conv2d's backward from gy [n, out, oh, ow], for the defined ones of gx (REQUIRES: zero-filled; the
// input gradient is added to it), gw and gb (overwritten).
void Conv2dBackward(const Tensor& x, const Tensor& w, const Tensor& gy, const kernels::ConvShape& g,
                    const Tensor& gx, const Tensor& gw, const Tensor& gb);

// ---- autocast on CUDA (Note [Autocast on CUDA], tensor/autocast.h) ----

// A new contiguous `dtype` (kBFloat16 or kFloat16) copy of float32 CUDA tensor x (any layout), rounded as
// the CPU rounds (tensor/low_precision_round.h). No autograd history.
Tensor RoundToLowPrecision(const Tensor& x, DType dtype);
// A new contiguous float32 copy of a bfloat16 or float16 CUDA tensor (exact). No autograd history.
Tensor WidenToFloat32(const Tensor& x);

// Conv2dForward with x and w contiguous bf16 or fp16 tensors of one dtype (b and y float32): im2col in that
// dtype, GEMMs with float32 accumulation (GemmLowPrecision), float32 output plus bias.
void Conv2dForwardLowPrecision(const Tensor& x, const Tensor& w, const Tensor& b, const kernels::ConvShape& g,
                               const Tensor& y);
// Conv2dBackward for the same operands, gy float32: gy is rounded to x's dtype for the GEMMs; gx, gw are the
// GEMMs' float32 results; gb sums gy as given (callers pass the rounded gy where it must be rounded).
void Conv2dBackwardLowPrecision(const Tensor& x, const Tensor& w, const Tensor& gy, const kernels::ConvShape& g,
                                const Tensor& gx, const Tensor& gw, const Tensor& gb);

// ---- the Reducer's bfloat16 buckets (Note [Reduce dtype rounding], reducer/bucket_cast.h) ----

// dst = bf16(src * scale) element-wise: the product in float32, rounded once with the functor the CPU
// runs (kernels::RoundScaledToBFloat16), so the bits equal ddp::CastScaledIntoSlot's on the CPU for a
// finite `scale`. Runs on the current stream of dst's device (where the collectives that read dst wait,
// Note [Current stream]). REQUIRES (checked): dst a contiguous bfloat16 CUDA tensor, src a float32 tensor
// (any layout) on the same device with dst's number of elements. No autograd.
void CastScaledToBFloat16(const Tensor& dst, const Tensor& src, float scale);

// Sets every byte of contiguous CUDA tensor `dst` (any dtype) to zero, +0.0 in the float dtypes, on the
// current stream of its device. REQUIRES (checked): dst contiguous, on CUDA.
void ZeroBytes(const Tensor& dst);

}  // namespace cuda
}  // namespace ddp

#endif  // DDP_TENSOR_CUDA_CUDA_OPS_H_
