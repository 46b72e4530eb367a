// A bf16 convolution forward of our own on AMX tiles, for channels-last activations (Note [Channels-last
// convolutions] in tensor/conv_channels_last.h). Internal to the tensor floor.
//
// Note [Channels-last forward on AMX tiles]
// The channels-last forward multiplies unfolded rows [pixels, kh*kw*c] by the weights (Note [Channels-last
// convolutions]): every row is written out, then oneDNN's matmul packs it again. With NHWC input the
// unfolding is not needed on AMX: for one tap (ky, kx) and 32 consecutive channels, the rows of 16
// consecutive output pixels of one output row lie in the input at a fixed stride (stride * c elements), so
// a tile load takes them straight from the input (zero-padded by one pixel on each side, one image at a
// time). The weights are packed once per call into the tiles' pair-interleaved layout. Each 16x16 output
// tile (16 pixels x 16 output channels) starts from zero and accumulates over K = (ky, kx, c) in order,
// 32 products per TDPBF16PS, and is stored once (the tiles go in 2x2 blocks, two pixel tiles against two
// tiles of output channels, so that each operand tile loaded serves two products). That sum order is
// the one oneDNN 2.6's AMX matmul sums in at K <= 1152 (bench/amx_probe/run.sh: no output differs at
// layer1's and layer2's GEMMs; at layer3's and layer4's K it sums in another order), so where this kernel
// runs (AmxForwardApplies) it gives the unfolded path's bits, without the unfolded rows (903 KB per image at
// ResNet-18's layer1). Where oneDNN is kept off AMX on an AMX CPU (ONEDNN_MAX_CPU_ISA), its matmul sums in
// its AVX-512 order, so the engine then keeps the unfolded path (it takes this kernel only where
// Bf16GemmsOnAmx(), tensor/cpu_gemm_bf16.h; the input gradient of tensor/conv_amx_input_gradient.h
// likewise).
#ifndef DDP_TENSOR_CONV_AMX_H_
#define DDP_TENSOR_CONV_AMX_H_

#include "tensor/conv_kernels.h"
#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

// True when AmxForwardChannelsLast computes this convolution: this CPU has AMX and the kernel grants its
// tile data to the process (asked once), and g is a channels-last 3x3 convolution with padding 1, stride
// 1 or 2, c a multiple of 32, out a multiple of 64 and K = 9c <= 1152 (Note [Channels-last forward on AMX
// tiles]). Thread-safe.
bool AmxForwardApplies(const ConvGeometry& g);

// y [n, oh, ow, out] (NHWC, float32) = conv(x [n, h, w, c] (NHWC, bf16), w [out, c, 3, 3] (bf16)), no bias,
// each output summed over (ky, kx, c) in order. REQUIRES: AmxForwardApplies(g) (checked). Images run on
// the kernel threads.
void AmxForwardChannelsLast(const BFloat16* x, const BFloat16* w, const ConvGeometry& g, float* y);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CONV_AMX_H_
