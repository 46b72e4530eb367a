// A bf16 convolution forward of our own on AMX tiles for channels-last activations on small maps, where
// the forward's K is past the one-chunk order of tensor/conv_amx.h or its one-row tiles run mostly empty.
// Internal to the tensor floor.
//
// Note [Channels-last forward on AMX tiles along the padded grid]
// ResNet-18's layer3 and layer4 convolutions (3x3, 256 and 512 channels, 7x7 and 4x4 maps at 28x28 images)
// and the stride-2 one into layer4 ran their bf16 forward on unfolded rows [pixels, 9c] (2.3 and 4.6 KB of
// bf16 per pixel, nine times the input) times the weights in oneDNN's AMX matmul, group by group
// (ImagesPerRowGroup, rows within 2 MB), with the weights reordered to [out, (ky, kx, c)] and repacked by
// oneDNN for every group: 8.4 and 12.3 ms a use on an AMX Xeon (family 6 model 167), one thread. The
// matmul sums K in chunks that depend on the GEMM's shape (Note [The K chunks of oneDNN's AMX matmul]), so
// the one-chunk kernel of Note [Channels-last forward on AMX tiles] does not give its bits there, and its
// tiles, one output row of 7 or 4 pixels, would run mostly empty. This kernel reads the input along a
// grid, as the input-gradient kernel reads its gradient. At stride 1 each image is padded with zero rows
// above and below and one zero pixel before each row, (w + 1) wide — that pixel is also the padding right
// of the row above, so the grid needs one padding column, not two — and a grid position
// q = oy * (w + 1) + ox reads, through tap (ky, kx), the padded pixel a fixed ky * (w + 1) + kx positions
// further. At stride 2 the padded image is split into its four parity planes (even and odd rows and
// columns), (oh + 1) x (ow + 1) pixels each, and tap (ky, kx) reads plane (ky % 2, kx % 2) a fixed
// (ky / 2) * (ow + 1) + kx / 2 positions further. Either way 16 consecutive positions are one tile load
// (stride c) for every tap, across output rows; positions past an output row (the grid's last column) are
// computed and dropped (19 tile rows for a 4x4 map's 16 pixels, 55 for 7x7's 49; the last tile of an image
// is configured short rather than filled from the next image, which measured slower). A tile of a few rows
// costs most of a full one, so where that saves a third of the tiles at stride 1 — a 4x4 map (layer4): 16
// positions in one tile against 19 in two — the image goes instead along three column-shifted copies (copy
// kx holds input pixel (y - 1, x + kx - 1) at (y, x), zeros outside the image), ow wide, tap (ky, kx)
// reading copy kx at (oy + ky, ox): layer4 5.8-5.9 ms a use -> 4.4-4.5; at 8x8 (layer3 on 32x32 images, 4
// tiles against 5) the copies, larger than the grid, measured slower (3.5 -> 3.9-4.1 ms). Two images' tiles
// against two tiles of 16 output channels, so every operand tile loaded serves two products; 128 output
// channels at a time, so their packed weights stay in L2 while every image passes. Each output tile sums K =
// (ky, kx, c) in 32-wide blocks, in the chunks the unfolded path's GEMM for that image's group sums in, found
// by AmxMatmulChunkBlocks: the first chunk from zero, each later one from zero and then added. So for every
// image in a group whose GEMM runs on oneDNN's AMX brgemm in a chunked order, y holds the unfolded path's
// bits (//tensor:conv_amx_test), without the rows and without oneDNN's repacking; groups whose GEMM sums
// otherwise are left to the caller. Per use, batch 64, one thread, the engine's forward with it against the
// unfolded rows (bazel-bin/tensor/amx_kernel_bench): layer3 3.2 ms against 6.9, layer4 4.5 against 7.5, the
// stride-2 one into layer4 3.4 against 3.9, layer3 on 32x32 images 3.9 against 8.0. Where the one-row kernel
// also computes a convolution (K <= 1152) the engine takes this one for output rows of at most 8 pixels
// (AmxGridForwardPreferred): into layer3, 7-pixel rows, 2.2 ms against the one-row kernel's 3.1; on rows of
// 14 and more the one-row kernel is as fast or faster (into layer2: 2.0 against 2.6-2.7; layer2, 14-pixel
// rows at stride 1, within 10%).
#ifndef DDP_TENSOR_CONV_AMX_GRID_FORWARD_H_
#define DDP_TENSOR_CONV_AMX_GRID_FORWARD_H_

#include <cstdint>

#include "tensor/conv_kernels.h"
#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

// True when AmxGridForwardChannelsLast can compute g's forward: this CPU has AMX and the kernel grants its
// tile data (asked once), g is a channels-last 3x3 convolution with padding 1 and stride 1 or 2, and c and
// out are multiples of 32. Thread-safe.
bool AmxGridForwardComputes(const ConvGeometry& g);

// True where the engine takes this kernel rather than the one-row kernel of tensor/conv_amx.h for a
// convolution both compute: AmxGridForwardComputes(g) and output rows of at most 8 pixels, whose one-row
// tiles would run at most half full (Note [Channels-last forward on AMX tiles along the padded grid] has
// the timings). Thread-safe.
bool AmxGridForwardPreferred(const ConvGeometry& g);

// y [n, oh, ow, out] (NHWC, float32) for the leading images of x [n, h, w, c] (NHWC, bf16) whose
// unfolded-path GEMM — images_per_gemm images per GEMM, the last GEMM taking the rest, each
// Gemm(false, true, images * oh * ow, out, 9c, ..., taps_first, ...) — sums in an order
// AmxMatmulChunkBlocks finds, with that GEMM's bits (Note [Channels-last forward on AMX tiles along the
// padded grid]); taps_first: the weights [out, (ky, kx, c)] (bf16). Returns how many leading images it
// computed (0, the full GEMMs' images, or n); the caller computes the rest. REQUIRES:
// AmxGridForwardComputes(g), images_per_gemm >= 1 (checked). Images run on the kernel threads; call
// outside parallel regions.
int64_t AmxGridForwardChannelsLast(const BFloat16* x, const BFloat16* taps_first, const ConvGeometry& g,
                                   int64_t images_per_gemm, float* y);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CONV_AMX_GRID_FORWARD_H_
