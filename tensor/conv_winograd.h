// The engine's own Winograd convolution for float32 3x3 stride-1 convolutions on AVX2, for CPUs where
// oneDNN 2.6 has no Winograd kernel (its `jit_wino_4x3` needs AVX-512). Internal to the tensor floor:
// tensor/conv_onednn.cc runs it where Note [Winograd convolutions] gives a convolution to Winograd.
//
// Note [Winograd F(4x4, 3x3) on AVX2]
// Winograd's F(4x4, 3x3) computes a 4x4 tile of a 3x3 convolution's output from a 6x6 tile of its input
// with 36 multiplications per (input, output) channel pair instead of 144: the input tile d and the
// filter g are transformed (V = B^T d B, U = G g G^T), multiplied point by point, and the 6x6 product
// transformed back (Y = A^T [U .* V] A; Lavin and Gray's matrices, interpolation points 0, +-1, +-2).
// Summed over the input channels, the point-by-point products are 36 matrix products, one per point:
// M[xi] [tiles, out] = V[xi] [tiles, c] * U[xi] [c, out], which run as sgemm (tensor/cpu_gemm.h). The
// transforms work on 8 channels at a time in AVX2 registers, so activations move to NHWC first (a
// transpose per image for NCHW ones; channels-last ones are read and written as they lie), and the
// tiles are processed in chunks of images whose transformed tiles fit a few MiB, so each point's matrices
// stay in cache between the transform and the product. The input gradient of such a convolution is the
// same computation on the output gradient with the filters transposed (in and out channels swapped) and
// flipped, padded by 2 - padding. Its weight gradient is the transpose of the forward's linear map: per
// point, the sum over the batch's tiles of the input tile's transform times the output gradient's
// (A dy A^T), a GEMM with the tiles as its inner dimension, transformed back to 3x3 by G^T . G.
// The rounding is Winograd's: the transforms add float32 rounding steps. At ResNet-18's shapes the results'
// relative RMS error against exact ones is 1-4e-6, 1.3-14x the direct primitives' (bench/conv_error), and the
// largest error stays within about 1e-5 of the output's largest magnitude, as oneDNN's Winograd does (Note
// [Winograd convolutions]).
#ifndef DDP_TENSOR_CONV_WINOGRAD_H_
#define DDP_TENSOR_CONV_WINOGRAD_H_

#include "tensor/conv_kernels.h"

namespace ddp {
namespace cpu {

// True when this kernel computes convolutions of geometry g: a 3x3 kernel, stride 1, padding at most 2,
// input and output channels multiples of 8, and a non-empty batch and output. Pure.
bool WinogradAvx2Fits(const ConvGeometry& g);

// y = conv(x, w) + b (b null: no bias): x [n, c, h, w] and y [n, out, oh, ow] (NHWC where g.channels_last),
// w [out, c, 3, 3]; y overwritten. REQUIRES: WinogradAvx2Fits(g). Thread-safe (per-thread scratch); uses
// the kernel thread count (tensor/threads.h).
void WinogradAvx2Forward(const float* x, const float* w, const float* b, const ConvGeometry& g, float* y);

// gx [n, c, h, w] (overwritten; NHWC where g.channels_last) = the input gradient of conv(., w) for the
// output gradient gy [n, out, oh, ow]. REQUIRES: WinogradAvx2Fits(g). Thread-safe.
void WinogradAvx2BackwardData(const float* w, const float* gy, const ConvGeometry& g, float* gx);

// gw [out, c, 3, 3] (overwritten) = the weight gradient of conv(x, .) for the output gradient gy: the
// filters' point sums over the batch's tiles (V^T W per point, W = A dy A^T the output gradient's tiles)
// transformed back with G^T . G. REQUIRES: WinogradAvx2Fits(g). Thread-safe.
void WinogradAvx2BackwardWeights(const float* x, const float* gy, const ConvGeometry& g, float* gw);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CONV_WINOGRAD_H_
