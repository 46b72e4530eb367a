// The weight gradient of a channels-last convolution computed tap by tap, over only the output pixels
// whose tap reads inside the input. Internal to the tensor floor (tensor/conv_channels_last.cc).
//
// Note [Weight gradients tap by tap]
// The unfolded-rows weight gradient (Note [Channels-last convolutions]) multiplies the output gradient's
// rows with every output pixel's kh*kw input pixels, zeros included where a tap falls in the padding. On
// small images that is much of the work: a 3x3 convolution with padding 1 on 4x4 outputs (ResNet-18's
// layer4) reads the padding with 44 of its 144 (pixel, tap) pairs, 31%; on 7x7 outputs 18%, on 14x14 9%.
// Tap by tap, the gradient of tap (ky, kx) is one GEMM, gw[:, tap, :] = Σ gy[p]^T x[p's input pixel],
// whose sum runs over the output pixels p whose input pixel lies inside: per image a rectangle of output
// rows and columns. Both operands are gathered (the output gradient's rows of those pixels and the input
// pixels they read) and the GEMM's inner dimension is the whole batch's pixels, so each weight-gradient
// element is written once rather than once per group of images. The gathers copy the output gradient
// once per tap besides the input, so this wins only where enough of the work is padding: on an AMD EPYC
// (family 26 model 2, AVX512_BF16), one thread, batch 64, layer4's bf16 weight gradient takes ~30% less
// time and layer3's a few percent, while on 14x14 outputs the unfolded rows are faster
// (tensor/conv_bench.cc). Hence the rule: tap by tap where at least kMinPaddedTapFraction of the (pixel,
// tap) pairs read padding. The sums are the same products in another order (each tap's pixels in image
// order, the batch in one sum).
//
// Note [Padding skips off AMX]
// Where the bf16 GEMMs run on AMX tiles (oneDNN's matmul on an AMX CPU), the two padding skips (this Note's
// and Note [Forward by pixel class]) stay off under the default rule and ResNet-18's layer3 and layer4
// keep the unfolded rows. Their GEMMs are small (64-320 rows per pixel class; one tap's pixels), and
// oneDNN 2.6's matmul sends such shapes to its AVX512_BF16 kernel (gemm:jit) instead of the tiles, so on the
// AMX Xeon (family 6 model 167) they save little: ResNet-18's convolutions of one step take 346-349 ms with
// them and 350 ms with the unfolded rows on the tiles (tensor/conv_bench.cc, its per-step totals). And
// resnet18's one-epoch bf16 recipe trained with them to 0.8846, 0.9059 and 0.8724 on seeds 0-2 against
// 0.9107, 0.9040 and 0.9010 with the unfolded rows (float32: 0.9050, 0.9068, 0.8967; BENCHMARKS.md "Mixed
// precision: accuracy"). Both sum the same products in another order; the unfolded rows are the order the
// AMX runs were validated with.
#ifndef DDP_TENSOR_CONV_WEIGHT_GRADIENT_BY_TAP_H_
#define DDP_TENSOR_CONV_WEIGHT_GRADIENT_BY_TAP_H_

#include <cstdint>

#include "tensor/conv_kernels.h"
#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

// The fraction of (output pixel, tap) pairs at or above which the weight gradient runs tap by tap.
inline constexpr double kMinPaddedTapFraction = 0.15;

// Which weight-gradient algorithm channels-last convolutions run where they unfold rows: kAuto the rule
// of Note [Weight gradients tap by tap]; kRows and kTaps force one (tests, benchmarks).
enum class WeightGradientAlgorithm { kAuto, kRows, kTaps };

// Forces the algorithm for the convolutions that follow. Call while no convolution runs.
void SetWeightGradientAlgorithm(WeightGradientAlgorithm algorithm);

// The algorithm SetWeightGradientAlgorithm forced (kAuto: none). Thread-safe.
WeightGradientAlgorithm ForcedWeightGradientAlgorithm();

// The fraction of g's (output pixel, tap) pairs whose input pixel falls in the padding (0 for a convolution
// without padding whose taps stay inside).
double PaddedTapFraction(const ConvGeometry& g);

// True when the channels-last weight gradient of geometry g runs tap by tap: the forced algorithm, or the
// rule of Note [Weight gradients tap by tap], which keeps the unfolded rows where the GEMMs run on AMX
// tiles (`gemms_on_amx`: bf16 on an AMX CPU; Note [Padding skips off AMX]).
bool WeightGradientByTapApplies(const ConvGeometry& g, bool gemms_on_amx);

// taps_first [g.out, kh * kw * c] (overwritten) = the weight gradient of conv(x, .) for the output
// gradient gy, with x [n, h, w, c] and gy [n, oh, ow, out] channels-last; column (ky * kw + kx) * c + ch
// holds channel ch of tap (ky, kx). The bf16 overload sums in float32. Uses per-thread scratch.
void WeightGradientByTap(const float* x, const float* gy, const ConvGeometry& g, float* taps_first);
void WeightGradientByTap(const BFloat16* x, const BFloat16* gy, const ConvGeometry& g, float* taps_first);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CONV_WEIGHT_GRADIENT_BY_TAP_H_
