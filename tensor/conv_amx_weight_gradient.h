// A bf16 convolution weight gradient of our own on AMX tiles, for channels-last activations (Note
// [Channels-last convolutions] in tensor/conv_channels_last.h). Internal to the tensor floor.
//
// Note [Channels-last weight gradients on AMX tiles]
// On small output maps the channels-last bf16 weight gradient runs on the unfolded rows (Note [bf16 weight
// gradients on im2col]): for each group of images (ImagesPerRowGroup, rows within 2 MB) one oneDNN matmul
// gw[out, (ky, kx, c)] = gy_rows^T x rows, the first writing gw and each later one adding into it (a sum
// post-op). At ResNet-18's layer4 (512 channels, 4x4 maps, batch 64) that is five GEMMs of 512 x 4608
// float32 outputs over 224 pixels each: every group reads and writes all 9.4 MB of gw, and oneDNN 2.6's
// matmul takes 13 ms a use on an AMX Xeon (family 6 model 167), one thread, ~370 GFLOP/s. On AMX that
// matmul sums each 16x16 tile of a group's product from zero over the group's pixels in order, 32 per
// TDPBF16PS (a tail padded with zeros), and then adds the group's tile to gw: at ResNet-18's layer3, layer4
// and layer4.0 weight gradients (groups of 224, 441 and 448 pixels; 28x28 and 32x32 images; 1 and 2
// threads) no output differs from an AMX kernel that keeps that order (bench/amx_probe/wgrad_order.cc, run
// by bench/amx_probe/run.sh); with groups of 882 and 896 pixels (layer3.0) it sums in another order.
// This kernel keeps the order without the rows or the passes over gw. For 32 input channels at a time it
// goes tap by tap: it packs the input pixels that tap reads, every group's, as B operands (two pixels'
// channels interleaved, zeros in the padding and past a group's pixels), and group by group, for each 32
// output channels, sums the group's pixels in a 2x2 block of tiles (A: the output gradient transposed once
// per call, group by group) and adds the block to the groups before it in a [c / 32][out][taps][32] staging
// array, the group's B operands (14-28 KB) staying in L1 while its output channels go by (with the groups
// inside each 32 output channels, they came from L2 at every step: 5-15% slower,
// results/bench/amx_weight_gradient_group_outer_ab_2026-12-07.txt); the 32 channels' gradients of all taps
// are then written once from the staging array, straight into gw's [out, c, kh, kw] order. Where the
// transposed output gradient exceeds 1 MB (layer3: 1.6 MB at 28x28, 2.3 MB at 32x32) the groups go in
// chunks that stay in L2, one after another, adding into the same staging array. It takes
// only what the rows would have run on oneDNN's AMX brgemm (GemmOnAmxBrgemm, tensor/cpu_gemm_bf16.h: for
// small GEMMs oneDNN picks an AVX-512 kernel, another order) with groups of at most 448 pixels, the largest
// the probe shows in this order.
#ifndef DDP_TENSOR_CONV_AMX_WEIGHT_GRADIENT_H_
#define DDP_TENSOR_CONV_AMX_WEIGHT_GRADIENT_H_

#include <cstdint>

#include "tensor/conv_kernels.h"
#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

// True when AmxWeightGradientChannelsLast computes g's weight gradient with images_per_group images per
// group: this CPU has AMX and the kernel grants its tile data (asked once), g is channels-last with c and
// out multiples of 32 and n > 0, a group has at most 448 pixels (images_per_group * oh * ow), and oneDNN's
// matmul would run the unfolded rows' GEMMs on its AMX brgemm (Note [Channels-last weight gradients on AMX
// tiles]). Thread-safe.
bool AmxWeightGradientApplies(const ConvGeometry& g, int64_t images_per_group);

// gw [out, c, kh, kw] (float32, overwritten) = the weight gradient of the convolution for input x [n, h, w,
// c] (NHWC, bf16) and output gradient gy [n, oh, ow, out] (NHWC, bf16), each element summed as the unfolded
// rows' oneDNN matmuls on AMX sum it with groups of images_per_group images. REQUIRES:
// AmxWeightGradientApplies(g, images_per_group) (checked). Blocks of input channels run on the kernel
// threads.
void AmxWeightGradientChannelsLast(const BFloat16* x, const BFloat16* gy, const ConvGeometry& g,
                                   int64_t images_per_group, float* gw);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CONV_AMX_WEIGHT_GRADIENT_H_
