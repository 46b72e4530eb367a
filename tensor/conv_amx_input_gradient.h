// A bf16 convolution input gradient of our own on AMX tiles, for channels-last activations (Note
// [Channels-last convolutions] in tensor/conv_channels_last.h). Internal to the tensor floor.
//
// Note [Channels-last input gradients on AMX tiles]
// oneDNN 2.6's AMX backward-data primitive (jit:avx512_core_amx_bf16) is slow where the maps are small:
// at ResNet-18's layer4 (512 channels, 4x4, batch 64) on an AMX Xeon (family 6 model 167), one thread, it
// takes ~14.5 ms a use, 330 GFLOP/s, where the forward's matmul of the same size runs at several times that
// (its tiles run along one output row of 4 pixels). It sums each input-gradient element from zero over the
// output channels 32 at a time (one TDPBF16PS each) and, for each 32, over the taps from the last (ky = 2,
// kx = 2) to the first: at ResNet-18's four 3x3 stride-1 shapes and its three stride-2 ones no element of
// its output differs from an AMX kernel that keeps that order (bench/amx_probe/bwd_data_order.cc, run by
// bench/amx_probe/run.sh). This kernel keeps it, for 3x3 convolutions with padding 1 and stride 1 or 2.
// An input pixel (iy, ix) reaches, through tap (ky, kx), the output pixel (iy + 1 - ky, ix + 1 - kx) /
// stride where that divides. At stride 1 every tap reaches one, so in the output gradient padded by one
// pixel on each side, (ow + 2) wide, 16 consecutive positions q = iy * (ow + 2) + ix read rows a fixed
// offset away for every tap: one tile load, stride `out`. At stride 2 the input pixels fall into four
// classes by the parity of iy and ix; a class reaches outputs through the taps whose ky and kx have the
// matching parity (1, 2, 2 or 4 of them) and the others only meet zeros, so they are skipped (a zero
// product changes no non-zero sum), and within a class (iy, ix) = (2a + py, 2b + px) read rows a fixed
// offset from q = a * (ow + 2) + b. The grid's columns past a class's pixels ride along in the tiles and
// are dropped. Each 16x16 accumulator (16 positions x 16 input channels) starts from zero and is stored
// once; two position tiles against two channel tiles, so that every operand tile loaded serves two
// products. Stride-1 maps of at most 16 pixels (ResNet-18's layer4, 4x4) go otherwise: along the grid a 4x4
// map fills 22 tile rows in two tiles, and a tile of 6 rows costs most of a full one. Each image's output
// gradient is copied three times, shifted by 0, 1 and 2 columns and unpadded in width, so that for every
// tap the map's pixels read consecutive rows of one copy: one tile per image. Four images' tiles go against
// each weight tile loaded (the weights, 4.7 MB at layer4, are what L2 cannot hold), in groups of 8 images
// whose copies stay in L2 while every block of 16 input channels passes; the copies lie in blocks of 32
// channels so that a tile's rows are consecutive 64 bytes (rows 1 KB apart fall into a few L1 sets, and the
// kernel measured no faster than the grid that way). Layer4's input gradient: 6.4-6.7 ms along the grid,
// 4.8-5.0 this way (results/bench/amx_input_gradient_dense_maps_ab_2026-12-07.txt), in the same order, so
// with the same bits. Where the packed weights fit in L2 with room to spare (<= 1.5 MB: up to ResNet-18's
// layer3) the images go one at a time, each padded into its thread's buffer and serving all its passes over
// the input channels from there; a pass by pass walk over the whole batch, as above 1.5 MB where one pass's
// weights must stay in L2 while the images go by, reread the padded batch from memory every pass and
// measured 1.2-1.5x slower at layers 1-3
// (results/bench/amx_input_gradient_image_by_image_ab_2026-12-07.txt). Per use, batch 64, one thread,
// against the primitive (bazel-bin/tensor/amx_kernel_bench, best of 10 calls each, same run): stride 1 on
// 4x4 maps (layer4) 6.1 ms against 16.4 along the grid, 7x7 (layer3) 2.9 against 4.2-4.4, 8x8 4.1-4.3
// against 4.4-4.8, 14x14 and 28x28 (layer2, layer1) even with it (2.9-3.3 against 3.0-3.3); stride 2 on
// inputs of 7x7 (into layer4) 3.8-4.0 against 10.8-11.5, 14x14 and 16x16 (into layer3) 2.3 and 2.6-2.9
// against 4.3-4.4 and 5.3-5.7, 28x28 and 32x32 (into layer2) 1.9-2.1 and 2.6-2.9 against 5.2-5.4 and
// 6.5-7.5, 56x56 13.6-15.3 against 24.9-27.2. So the engine takes this kernel for stride-1 maps of at most
// 64 pixels and stride-2 inputs of at most 3136, the largest measured (AmxInputGradientApplies). It
// computes the primitive's bits (//tensor:conv_amx_test; resnet18's bf16 weights after 10 steps
// byte-identical).
#ifndef DDP_TENSOR_CONV_AMX_INPUT_GRADIENT_H_
#define DDP_TENSOR_CONV_AMX_INPUT_GRADIENT_H_

#include "tensor/conv_kernels.h"
#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

// True when AmxInputGradientChannelsLast can compute this convolution's input gradient: this CPU has AMX
// and the kernel grants its tile data (asked once), and g is a channels-last 3x3 convolution with padding 1
// and stride 1 or 2, c and out multiples of 32. Thread-safe.
bool AmxInputGradientComputes(const ConvGeometry& g);

// True when the engine's channels-last bf16 convolutions take AmxInputGradientChannelsLast for g's input
// gradient: it computes g's, on stride-1 maps of at most 64 pixels or stride-2 inputs of at most 3136,
// where it is the faster (Note [Channels-last input gradients on AMX tiles]). Thread-safe.
bool AmxInputGradientApplies(const ConvGeometry& g);

// gx [n, h, w, c] (NHWC, float32, overwritten) = the input gradient of the convolution of w [out, c, 3, 3]
// (bf16) for the output gradient gy [n, oh, ow, out] (NHWC, bf16), each element summed as oneDNN's
// backward-data primitive sums it. REQUIRES: AmxInputGradientComputes(g) (checked). Images and channel blocks
// run on the kernel threads.
void AmxInputGradientChannelsLast(const BFloat16* w, const BFloat16* gy, const ConvGeometry& g, float* gx);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CONV_AMX_INPUT_GRADIENT_H_
