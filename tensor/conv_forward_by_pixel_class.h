// The forward pass of a channels-last convolution that skips the taps falling in the padding, one GEMM per
// class of output pixels. Internal to the tensor floor (tensor/conv_channels_last.cc).
//
// Note [Forward by pixel class]
// The unfolded-rows forward (Note [Channels-last convolutions]) multiplies every output pixel's kh*kw
// input pixels with the weights, zeros included where a tap falls in the padding: 31% of the work of a
// 3x3 convolution with padding 1 on 4x4 outputs (ResNet-18's layer4), 18% on 7x7
// (tensor/conv_weight_gradient_by_tap.h, PaddedTapFraction). Output pixels fall into classes by which taps
// read inside: along each axis, the positions whose inside kernel offsets are the same range (for 3x3,
// padding 1: the first position, the inner ones, the last), and a class is a pair of such runs (a corner,
// an edge, the interior). Each class is one product of its pixels' inside taps, unfolded, with the
// weights of those taps: the weights reordered to [out, kh, kw, c] hold a kernel row's inside taps side by
// side, so where a class keeps whole kernel rows its weights are one block of columns, and otherwise one
// block per kernel row, summed. The products land in scratch and are copied (with the bias) to the
// class's NHWC output rows. The sums are the inside products in another order than the unfolded rows'
// (which add the padding's zeros exactly). It applies by the rule of Note [Weight gradients tap by tap]
// (at least kMinPaddedTapFraction of the (pixel, tap) pairs in the padding): on an AMD EPYC (family 26
// model 2, AVX512_BF16), one thread, batch 64, the bf16 forward of layer4's 3x3 convolutions and of the
// stride-2 one into it takes ~20% less time, layer3's ~9%, while with 9% of the pairs in the padding
// (14x14 outputs, the stride-2 convolutions into layer2 and layer3) the unfolded rows are as fast or
// faster (tensor/conv_bench.cc "fwd classes" against "fwd rows"). Where the GEMMs run on AMX tiles the rule
// keeps the unfolded rows (Note [Padding skips off AMX] in tensor/conv_weight_gradient_by_tap.h).
#ifndef DDP_TENSOR_CONV_FORWARD_BY_PIXEL_CLASS_H_
#define DDP_TENSOR_CONV_FORWARD_BY_PIXEL_CLASS_H_

#include "tensor/conv_kernels.h"
#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

// Which forward algorithm channels-last convolutions run where they unfold rows: kAuto the rule of Note
// [Forward by pixel class]; kRows and kClasses force one (tests, benchmarks).
enum class ForwardAlgorithm { kAuto, kRows, kClasses };

// Forces the algorithm for the convolutions that follow. Call while no convolution runs.
void SetForwardAlgorithm(ForwardAlgorithm algorithm);

// The algorithm SetForwardAlgorithm forced (kAuto: none). Thread-safe.
ForwardAlgorithm ForcedForwardAlgorithm();

// True when the channels-last forward of geometry g runs by pixel class: the forced algorithm, or the rule
// of Note [Forward by pixel class], which keeps the unfolded rows where the GEMMs run on AMX tiles
// (`gemms_on_amx`: bf16 on an AMX CPU; Note [Padding skips off AMX] in tensor/conv_weight_gradient_by_tap.h).
bool ForwardByPixelClassApplies(const ConvGeometry& g, bool gemms_on_amx);

// y [n, oh, ow, out] (overwritten) = conv(x [n, h, w, c], w) + b (null: no bias), with the weights given
// as taps_first [out, kh * kw * c] (column (ky * kw + kx) * c + ch holds channel ch of tap (ky, kx)). The
// bf16 overload sums in float32. Uses per-thread scratch.
void ForwardByPixelClass(const float* x, const float* taps_first, const float* b, const ConvGeometry& g,
                         float* y);
void ForwardByPixelClass(const BFloat16* x, const BFloat16* taps_first, const float* b, const ConvGeometry& g,
                         float* y);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CONV_FORWARD_BY_PIXEL_CLASS_H_
