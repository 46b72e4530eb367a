// CUDA implementations of the ops in tensor/ops.h not yet written once for both devices, and the CUDA
// entry points of those that are. The public ops dispatch here when an input lives on a CUDA device
// (`#ifdef DDP_WITH_CUDA`), so callers never include this header; the contracts are those of tensor/ops.h. Inputs of one op must share one CUDA device (checked). Kernels
// run on the current stream (Note [Current stream], tensor/cuda/context.h). Only built with
// --config=cuda.
//
// Differences from the CPU path, by design:
//   * NllLoss / CrossEntropy with CUDA targets do not check labels on the host (that would synchronise
//     every step): an out-of-range label makes the loss NaN.
//   * Dropout draws its mask from a counter-based hash seeded by one generator.Next() draw, so masks
//     differ from the CPU's for the same seed (the distribution is the same).
#ifndef DDP_TENSOR_CUDA_CUDA_OPS_H_
#define DDP_TENSOR_CUDA_CUDA_OPS_H_

#include "tensor/cuda/kernels.h"
#include "tensor/functors.h"
#include "tensor/random.h"
#include "tensor/tensor.h"

namespace ddp {
namespace cuda {

Tensor Dropout(const Tensor& x, float p, bool training, Generator& generator);
Tensor LogSoftmax(const Tensor& x, int64_t dim);
Tensor NllLoss(const Tensor& log_probs, const Tensor& target);
Tensor CrossEntropy(const Tensor& logits, const Tensor& target);

// dst = src for any combination of CPU and CUDA devices and dtypes (at least one side on CUDA).
// REQUIRES: equal element counts (ddp::CopyInPlace checks them).
void CopyInPlace(const Tensor& dst, const Tensor& src);

// Optimizer steps over contiguous CUDA tensors of equal size (nn/sgd.cc, nn/adam.cc). `buf` may be
// undefined when step.momentum == 0.
void SgdStep(const Tensor& param, const Tensor& buf, const Tensor& grad, const functors::SgdStep& step);
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

}  // namespace cuda
}  // namespace ddp

#endif  // DDP_TENSOR_CUDA_CUDA_OPS_H_
