// Conv2d's CPU kernels for channels-last activations (Note [Channels-last activations],
// tensor/memory_format.h): x [n, h, w, c] and y [n, oh, ow, out] as they lie (NHWC), weights
// [out, c, kh, kw] as always. Internal to the tensor floor (tensor/ops_conv.cc).
//
// Note [Channels-last convolutions]
// The passes Note [Conv2d kernel choice] gives to oneDNN's primitives run on the NHWC arrays directly:
// on AMX the bf16 primitives take NHWC as their own layout, so nothing is converted; float32 primitives
// reorder into their channel blocks inside oneDNN. Where the bf16 GEMMs are not oneDNN's (a CPU without
// bf16 instructions, Note [bf16 operands of oneDNN's convolutions]) bf16 operands are widened to float32
// for the float32 primitives, as for NCHW activations. The passes it gives to im2col, the bf16 forward (Note
// [bf16 forward on im2col]) and the small bf16 weight gradients (Note [bf16 weight gradients on im2col])
// unfold NHWC: one row per output pixel holding its kh*kw input pixels' c channels side by side
// ([P, kh*kw*c], one copy per pixel instead of one per channel and tap), multiplied with the weights
// reordered to [out, kh, kw, c]; the forward GEMM writes the NHWC output rows in place. On small images,
// where many taps read padding, the forward runs by pixel class (Note [Forward by pixel class],
// tensor/conv_forward_by_pixel_class.h) and the weight gradient tap by tap (Note [Weight gradients tap by
// tap], tensor/conv_weight_gradient_by_tap.h), both skipping those taps, unless the GEMMs run on AMX tiles
// (Note [Padding skips off AMX]). The backward primitives compute what
// they compute for NCHW activations; the GEMMs sum the same products in another order (over (kh, kw, c)
// rather than (c, kh, kw)), and the bias gradient sums image by image. A convolution that Note [bf16 input
// gradients as a forward convolution] turns on for takes the primitive. Where the unfolded bf16 forward would
// run on oneDNN's AMX matmul and the convolution is one that AmxForwardApplies takes (ResNet-18's layer1 and
// layer2 3x3 convolutions), the same sums run on AMX tiles straight from the input instead, bit for bit (Note
// [Channels-last forward on AMX tiles], tensor/conv_amx.h); a weight gradient on unfolded rows that oneDNN's
// AMX matmul would sum likewise runs on AMX tiles straight from the input (Note [Channels-last weight
// gradients on AMX tiles], tensor/conv_amx_weight_gradient.h).
#ifndef DDP_TENSOR_CONV_CHANNELS_LAST_H_
#define DDP_TENSOR_CONV_CHANNELS_LAST_H_

#include "tensor/conv_kernels.h"
#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

// y (NHWC) = conv(x (NHWC), w) + b (null: no bias). The bf16 overload multiplies with float32 sums.
void ConvForwardChannelsLast(const float* x, const float* w, const float* b, const ConvGeometry& g, float* y);
void ConvForwardChannelsLast(const BFloat16* x, const BFloat16* w, const float* b, const ConvGeometry& g,
                             float* y);

// The wanted gradients of `grads` (gx NHWC; null: not wanted; each overwritten) from the float32 NHWC
// output gradient gy. The bf16 overload multiplies gy rounded to bf16 (as ConvBackward does), which
// `gy_low` holds where the caller has it (NHWC; null: rounded here); the bias gradient sums gy as it is.
// gy may be null when gy_low is not and no bias gradient is wanted.
void ConvBackwardChannelsLast(const float* x, const float* w, const float* gy, const ConvGeometry& g,
                              ConvGrads grads);
void ConvBackwardChannelsLast(const BFloat16* x, const BFloat16* w, const float* gy, const BFloat16* gy_low,
                              const ConvGeometry& g, ConvGrads grads);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CONV_CHANNELS_LAST_H_
