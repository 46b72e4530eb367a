// The input gradient of a channels-last convolution computed tap by tap, over only the output pixels whose
// tap reads inside the input. Internal to the tensor floor (tensor/conv_channels_last.cc).
//
// Note [Input gradients tap by tap]
// The input gradient sends each output pixel's gradient back through the weights of every tap to the input
// pixel that tap read; the unfolded rows (Note [Channels-last convolutions]) and oneDNN's backward-data
// primitives also compute the products of taps that fell in the padding, which nothing receives: 31% of
// the (pixel, tap) pairs of a 3x3, padding-1 convolution on 4x4 outputs, 18% on 7x7
// (tensor/conv_inside_taps.h). Tap by tap, the contribution of tap (ky, kx) is one GEMM over the output
// pixels whose input pixel lies inside (per image a rectangle, from the tensor/conv_inside_taps.h ranges),
// gy_inside [pixels, out] times the tap's weights [out, c] (a block of columns of the weights reordered to
// [out, kh, kw, c]), whose rows are added to the input pixels they belong to. The output gradient's rows
// are gathered unless every pixel reads inside; the products of the whole batch are one GEMM per tap. Each
// input pixel's gradient is the float32 sum of its taps' products in tap order (ky, then kx), starting
// from zero. It applies by the rule of the other passes that skip the padding (kMinPaddedTapFraction):
// on an AMD EPYC (family 26 model 2, AVX512_BF16), one thread, batch 64, the bf16 input gradient of
// ResNet-18's layer3 convolutions takes 6.8-7.4 ms against 8.4 on oneDNN's primitive and that of the
// stride-2 convolution into layer4 3.9-4.2 against 6.2-6.9, while layer4's own (4x4) costs what the
// primitive's does (tensor/conv_bench.cc "gx taps" against "gx all taps").
#ifndef DDP_TENSOR_CONV_INPUT_GRADIENT_BY_TAP_H_
#define DDP_TENSOR_CONV_INPUT_GRADIENT_BY_TAP_H_

#include "tensor/conv_inside_taps.h"
#include "tensor/conv_kernels.h"
#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

// Which input-gradient algorithm channels-last convolutions run: kAuto the rule of Note [Input gradients
// tap by tap]; kAllTaps every tap, padding included (oneDNN's backward-data primitive where the pass runs
// on primitives, else the unfolded rows); kInsideTaps tap by tap (tests, benchmarks).
enum class InputGradientAlgorithm { kAuto, kAllTaps, kInsideTaps };

// Forces the algorithm for the convolutions that follow. Call while no convolution runs.
void SetInputGradientAlgorithm(InputGradientAlgorithm algorithm);

// True when the channels-last input gradient of geometry g runs tap by tap (the forced algorithm, or the
// rule of Note [Input gradients tap by tap]).
bool InputGradientByTapApplies(const ConvGeometry& g);

// gx [n, h, w, c] (overwritten) = the input gradient of conv(., w) for the output gradient gy [n, oh, ow,
// out], both channels-last, with the weights `taps_first` [out, kh * kw * c] (column (ky * kw + kx) * c +
// ch: channel ch of tap (ky, kx)). The bf16 overload sums in float32. Uses per-thread scratch.
void InputGradientByTap(const float* taps_first, const float* gy, const ConvGeometry& g, float* gx);
void InputGradientByTap(const BFloat16* taps_first, const BFloat16* gy, const ConvGeometry& g, float* gx);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CONV_INPUT_GRADIENT_BY_TAP_H_
