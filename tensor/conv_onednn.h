// Conv2d's CPU passes through oneDNN's convolution primitives (forward, backward-data, backward-weights),
// for float32 operands and for mixed precision's bf16 operands with float32 outputs, and the rules that
// choose a convolution's kernel (tensor/conv_kernel_choice.cc). Internal to the tensor floor:
// tensor/conv_kernels.cc calls these when ConvKernelFor(g) is not kIm2Col.
//
// Note [Conv2d kernel choice]
// Two CPU kernels compute Conv2d: im2col + one sgemm per group of images (Note [Conv2d image groups]) and
// oneDNN's convolution primitives. The engine's tensors are plain NCHW; oneDNN's direct kernels run on
// blocked layouts (nChw16c activations, OIhw16i16o weights), so each call reorders its operands in and
// its result out (per-thread scratch, reused across calls; no blocked tensor outlives the call). Even
// with those reorders the primitives are faster where the convolution has a spatial kernel and enough
// input channels: on an AVX-512 Xeon (family 6 model 207), one thread, batch 64, ResNet-18's 3x3
// convolutions take 3-25% less time forward + backward (all of a step's convolutions 13% less, forward
// alone 19% less), and the MNIST cnn's conv2 (32 -> 64) gains as well. They are slower for 1x1 convolutions
// (the stride-2 downsamples: the whole input is reordered for a quarter of its pixels) and for one input
// channel (conv1 of both models), where im2col is a single cheap GEMM. Hence the default rule: oneDNN for
// kh*kw > 1 and c >= 8, im2col otherwise (tensor/conv_bench.cc prints both kernels per shape, interleaved;
// BENCHMARKS.md "Convolution kernels"). The two kernels differ only in the order of their float32 sums
// (agreeing to ~1e-6 relative); Conv2d and Conv2dReluMaxPool2d choose by the same rule, so they agree bit
// for bit with each other. DDP_CONV_KERNEL=im2col|onednn|auto in the environment (read once, at the
// first convolution) or SetConvKernel forces one kernel for every shape, e.g. for tests and A/B runs;
// DDP_CONV_KERNEL=winograd forces Note [Winograd convolutions] wherever it runs, and
// DDP_CONV_KERNEL=winograd_avx2 the engine's own Winograd even where oneDNN has one.
// Where oneDNN has no kernel for a case (it reports unimplemented), im2col runs.
//
// Note [Winograd convolutions]
// For 3x3, stride-1 float32 convolutions with 16 or more input channels the default is oneDNN's Winograd
// algorithm (F(4x4, 3x3), `jit_wino_4x3` on AVX-512): it computes the same convolution with about a
// quarter of the multiplications, transforming 6x6 input tiles and the weights. On the AVX-512 Xeon
// above, one thread, batch 64, ResNet-18's stride-1 3x3 layers run forward + backward 1.4-2.9x faster
// than with the direct primitives (BENCHMARKS.md "Convolution kernels"). The price is rounding: the tile
// transforms add float32 rounding steps, so results differ from the direct algorithm's by about 1e-5 of
// the output's magnitude instead of 1e-6 (the direct and im2col kernels differ only in summation order).
// That is well inside what training tolerates and far below bf16's rounding, but it is not what PyTorch's
// CPU convolutions compute, so DDP_CONV_KERNEL=onednn (direct primitives wherever oneDNN is used) gives
// those numbers back. Where oneDNN has no Winograd kernel for float32 (a CPU without AVX-512) the engine's
// own F(4x4, 3x3) runs (Note [Winograd F(4x4, 3x3) on AVX2], tensor/conv_winograd.h) for all three passes
// of convolutions whose channels are multiples of 8, the direct primitives elsewhere; bf16 operands take
// the direct primitives unless they run on float32 ones (Bf16ConvOnFloat32Primitives).
//
// Primitives are created once per thread and (pass, element type, geometry, bias) and cached: training
// repeats the same shapes every step.
#ifndef DDP_TENSOR_CONV_ONEDNN_H_
#define DDP_TENSOR_CONV_ONEDNN_H_

#include <string>

#include "tensor/conv_kernels.h"
#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

// kOneDnn: oneDNN's direct convolution primitives; kWinograd: the Winograd algorithm (Note [Winograd
// convolutions]): oneDNN's primitives where it has a Winograd kernel for the case, else the engine's own
// (tensor/conv_winograd.h) where that fits the shape, else the direct primitives; kWinogradAvx2: the
// engine's own wherever it fits, on any CPU, the direct primitives elsewhere (tests, A/B runs).
enum class ConvKernel { kAuto, kIm2Col, kOneDnn, kWinograd, kWinogradAvx2 };

// Forces the CPU convolution kernel for the convolutions that follow (kAuto: DDP_CONV_KERNEL if set,
// else the rule of Note [Conv2d kernel choice]). Call while no convolution runs (tests, start-up).
void SetConvKernel(ConvKernel kernel);

// The kernel for a convolution of geometry g (never kAuto). Dies naming the value when DDP_CONV_KERNEL
// is set to something other than auto, onednn, winograd, im2col or winograd_avx2.
ConvKernel ConvKernelFor(const ConvGeometry& g);

// True when a float32 convolution of geometry g runs its three passes on the engine's own Winograd
// (tensor/conv_winograd.h): under kWinogradAvx2 wherever that kernel fits; under kWinograd where it fits
// and oneDNN runs no AVX-512 kernels (so has no Winograd primitive), unless DDP_CONV_WINOGRAD_AVX2=0 is set
// in the environment (read once; A/B runs), which leaves those convolutions to the direct primitives.
bool WinogradAvx2Runs(const ConvGeometry& g);

// Note [bf16 weight gradients on im2col]
// oneDNN 2.6's bf16 backward-weights primitive is slow where the output is small in space: on an AMX Xeon
// (family 6 model 167), one thread, batch 64, at ResNet-18's layer3 and layer4 shapes (7x7 and 4x4
// outputs) it takes 1.5-5x the time of im2col + the bf16 GEMM (which then is one large GEMM with the
// batch's pixels as its inner dimension), while at 14x14 and 28x28 outputs the two are within 15%
// (tensor/conv_bench.cc; BENCHMARKS.md "Convolution kernels"). PyTorch 2.15's own bf16 convolutions show
// the same cost at those shapes. So under the default rule a bf16 convolution that runs oneDNN's bf16
// primitives computes its weight gradient with im2col where the output has at most 64 pixels; its
// input-gradient pass stays on the primitives unless turned to a forward convolution (Note [bf16 input
// gradients as a forward convolution]; its forward: Note [bf16 forward on im2col]). The two kernels
// differ only in the order of their float32 sums. A kernel forced by DDP_CONV_KERNEL or SetConvKernel applies
// to every pass. True when the weight gradient of a bf16 convolution of geometry g runs im2col by that rule.
bool Bf16WeightGradientOnIm2Col(const ConvGeometry& g);

// Note [Float32 weight gradients on im2col without AVX-512]
// Where oneDNN runs no AVX-512 kernels (a CPU without AVX-512, or ONEDNN_MAX_CPU_ISA=AVX2), its float32
// backward-weights primitive (`jit:avx2`) is the slow pass: on an AMD EPYC of family 25 (AVX2), one thread,
// batch 64, at every 3x3 shape of ResNet-18 it took 1.03-2.3x the time of im2col + sgemm (1.2-1.4x at most
// shapes; tensor/conv_bench.cc; BENCHMARKS.md "Convolution kernels"), while its forward and backward-data
// primitives stay as fast or faster. So there a float32
// convolution that runs the primitives, or a bf16 one on float32 primitives (Bf16ConvOnFloat32Primitives),
// computes its weight gradient with im2col (NCHW) or the unfolded rows (channels-last); its other passes stay
// on the primitives. The two differ only in the order of their float32 sums. A convolution that runs the
// engine's own Winograd (Note [Winograd F(4x4, 3x3) on AVX2]) computes its weight gradient there instead.
// DDP_CONV_WEIGHT_GRAD=auto|primitive|im2col in the environment (read once) keeps the rule, or puts every
// such weight gradient with the convolution's other passes (the primitive, or the engine's Winograd) or on
// im2col, whatever the CPU (A/B runs, tests). A kernel forced by
// DDP_CONV_KERNEL or SetConvKernel applies to every pass. True when the weight gradient of such a convolution
// of geometry g runs im2col by that rule. Dies naming the value when DDP_CONV_WEIGHT_GRAD is set to anything
// else.
bool Float32WeightGradientOnIm2Col(const ConvGeometry& g);

// Note [bf16 forward on im2col]
// Under the default rule, a bf16 convolution that runs oneDNN's bf16 primitives (AMX) computes its
// forward pass with im2col + the bf16 matmul, and its backward passes on the primitives (Note [bf16
// weight gradients on im2col] aside). The reason is accuracy, not speed: the two forwards differ only in
// the order of their float32 sums (//tensor:conv_kernel_choice_test), yet on an AMX Xeon (family 6
// model 167) resnet18's one-epoch bf16 recipe trained with oneDNN 2.6's forward primitive reached
// 0.865-0.875 test accuracy on three seeds, against 0.892-0.908 on five seeds with this rule (mean 0.9036)
// and 0.897-0.907 in float32 (mean 0.9032; BENCHMARKS.md "Mixed precision: accuracy"): those runs took an
// early loss excursion that float32 runs did not. Why the forward primitive's rounding makes it likelier
// is not known. DDP_BF16_CONV_FORWARD=primitive in the environment (read once) keeps the
// forward on the primitive, for such comparisons. A kernel forced by DDP_CONV_KERNEL or SetConvKernel
// applies to every pass.
// True when bf16 convolutions run their forward pass on im2col by that rule.
bool Bf16ForwardOnIm2Col();

// Note [bf16 input gradients as a forward convolution]
// A stride-1 convolution's input gradient is itself a convolution: of the output gradient gy with the
// weights transposed (in and out channels swapped) and flipped in space, padded by kh - 1 - padding. For
// bf16 convolutions on oneDNN's primitives, oneDNN 2.6's backward-data primitive is slow where the output
// is small in space: at ResNet-18's layer4 (512 channels, 4x4 outputs, batch 64) on an AMX Xeon (family
// 6 model 167), one thread, it takes 16.4-16.6 ms a use against 9.8-10.4 ms for the forward on im2col +
// the bf16 matmul with the transposition and rounding (tensor/conv_bench.cc), 3 uses a step; at layer3's
// 7x7 outputs the primitive is the faster (5.8-6.2 against 7.5-8.0 ms, measured with this rule extended to
// 64 pixels). Turned on, the input gradient of a bf16 convolution that runs the primitives, with stride 1,
// a square kernel, padding < its size and at most 16 output pixels, runs as that forward convolution on
// im2col (gy rounded to bf16 as the primitive takes it; the sums in another order). It is off by default:
// resnet18's one-epoch bf16 recipe trained with it reached a lower accuracy on average over five seeds than
// with the primitive (BENCHMARKS.md "Mixed precision: accuracy"; Note [bf16 forward on im2col] tells the same
// of the forward). DDP_BF16_CONV_INPUT_GRAD=forward in the environment (read once) or
// SetBf16InputGradientAsForward(true) turns it on (=primitive, or false, keeps it off). A kernel forced by
// DDP_CONV_KERNEL or SetConvKernel applies to every pass.

// Overrides DDP_BF16_CONV_INPUT_GRAD for the convolutions that follow. Call while no convolution runs.
void SetBf16InputGradientAsForward(bool on);

// True when the input gradient of a bf16 convolution of geometry g that runs the primitives runs as a
// forward convolution (Note [bf16 input gradients as a forward convolution]). Dies naming the value when
// DDP_BF16_CONV_INPUT_GRAD is set to something other than primitive or forward.
bool Bf16InputGradientAsForward(const ConvGeometry& g);

// Note [bf16 convolutions on float32 Winograd]
// Where the CPU's bf16 arithmetic is AVX512_BF16 without AMX, vdpbf16ps does at most twice a float32 FMA's
// work (Note [bf16 GEMM kernel choice]), while float32 Winograd F(4x4, 3x3) does a quarter of the direct
// algorithm's multiplications at the price of its tile transforms. Which is faster depends on the shape.
// On an AMD EPYC of family 26, one thread, channels-last (tensor/conv_bench.cc, the "bf16 NHWC fp32 wino"
// and "bf16 NHWC bf16 kernels" variants; BENCHMARKS.md "bf16 mixed precision"), float32 Winograd on the
// widened operands wins only at ResNet-18's layer3 on CIFAR's 32x32 images (256 -> 256 channels, 8x8
// outputs): 23.0 against 27.6 ms forward + backward at batch 64, 104.2 against 126.0 ms at batch 256. Its
// outputs fill whole 4x4 tiles, its 256 channels make the tile GEMMs large next to the transforms, and its
// 256 tiles per batch share the weights' transform. Where the outputs leave part of a tile unused (7x7,
// 14x14) or the channels are fewer (layer1, layer2: 64 and 128), the bf16 kernels win by 1-35%; on 4x4
// outputs (layer4) they win at any batch (23.1 against 35.7 ms at batch 64, 89.8 against 96.9 at 256, 256
// tiles), as a third of those outputs' (pixel, tap) pairs read padding, which the direct kernels skip
// (Note [Forward by pixel class], Note [Weight gradients tap by tap]) and Winograd computes. Hence the rule:
// under bf16 on AVX512_BF16 without AMX, a convolution that Note [Winograd convolutions] gives to Winograd
// in float32, with outputs of at least 8x8 that are a whole number of 4x4 tiles, at least 256 input and
// output channels and at least 256 tiles in the batch, runs float32 Winograd on its bf16 operands widened
// to float32 (exactly), the output gradient rounded to bf16 first as for the bf16 kernels. So the operands
// are the bf16 kernels' and only the sums differ: Winograd's float32 rounding, about 1e-5 of the output's
// magnitude (Note [Winograd convolutions]), far below bf16's. With AMX the bf16 kernels are several times
// faster and the rule never applies. DDP_BF16_CONV_WINOGRAD=auto|off|on in the environment (read once) or
// SetBf16Winograd chooses the rule, never, or every convolution Winograd takes in float32.
enum class Bf16Winograd { kAuto, kNever, kAlways };

// Overrides DDP_BF16_CONV_WINOGRAD for the convolutions that follow (kAuto: the environment's, else the
// rule). Call while no convolution runs.
void SetBf16Winograd(Bf16Winograd choice);

// True when a bf16 convolution of geometry g runs oneDNN's float32 primitives on its operands widened to
// float32 (exactly) instead of bf16 kernels: where the bf16 GEMMs are not oneDNN's (Note [bf16 operands of
// oneDNN's convolutions], tensor/conv_kernels.cc), or where Note [bf16 convolutions on float32 Winograd]
// gives g to float32 Winograd. Dies naming the value when DDP_BF16_CONV_WINOGRAD is set to something other
// than auto, off or on.
bool Bf16ConvOnFloat32Primitives(const ConvGeometry& g);

// The kernel a float32 forward convolution of geometry g runs on this thread: "im2col", "winograd_avx2"
// (tensor/conv_winograd.h), or oneDNN's name of its primitive (e.g. "jit_wino_4x3:avx512_core" for
// Winograd, "jit:avx512_core" for the direct one).
// Creates and caches the primitive as a convolution would.
std::string OneDnnConvImplementation(const ConvGeometry& g);

// Each pass below runs the algorithm ConvKernelFor(g) names (Winograd or the direct primitives) and
// returns false, having written nothing, when oneDNN has no kernel for the case on this
// CPU (e.g. bf16 without AVX-512); the caller then runs the im2col kernel. All arrays are
// contiguous: activations (x, y and their gradients) NCHW, or NHWC where g.channels_last (Note
// [Channels-last activations]), weights [out, c, kh, kw]. Thread-safe (primitives and scratch are per
// thread).

// y [n, out, oh, ow] = conv(x [n, c, h, w], w) + b [out] (b null: no bias). The BFloat16 overload
// multiplies bf16 x and w with float32 accumulation into float32 y.
bool OneDnnConvForward(const float* x, const float* w, const float* b, const ConvGeometry& g, float* y);
bool OneDnnConvForward(const BFloat16* x, const BFloat16* w, const float* b, const ConvGeometry& g, float* y);

// gx [n, c, h, w] = the input gradient of conv(., w) for the output gradient gy [n, out, oh, ow]
// (overwritten, not accumulated). bf16 w and gy give a float32 gx.
bool OneDnnConvBackwardData(const float* w, const float* gy, const ConvGeometry& g, float* gx);
bool OneDnnConvBackwardData(const BFloat16* w, const BFloat16* gy, const ConvGeometry& g, float* gx);

// gw [out, c, kh, kw] (overwritten) = the weight gradient of conv(x, .) for the output gradient gy, and
// gb [out] (overwritten; null: not wanted) its bias gradient. bf16 x and gy give a float32 gw.
bool OneDnnConvBackwardWeights(const float* x, const float* gy, const ConvGeometry& g, float* gw, float* gb);
bool OneDnnConvBackwardWeights(const BFloat16* x, const BFloat16* gy, const ConvGeometry& g, float* gw,
                               float* gb);

// The wanted ones of both backward passes from one output gradient gy: gx (null: not wanted) as
// OneDnnConvBackwardData and gw (null: not wanted) as OneDnnConvBackwardWeights without bias, with gy
// reordered into the primitives' layout once where both passes take the same one. Returns false, having
// written nothing, when oneDNN has no kernel for a wanted pass. The same numbers as the two calls.
bool OneDnnConvBackward(const float* x, const float* w, const float* gy, const ConvGeometry& g, float* gx,
                        float* gw);
bool OneDnnConvBackward(const BFloat16* x, const BFloat16* w, const BFloat16* gy, const ConvGeometry& g,
                        float* gx, float* gw);

// OneDnnConvBackward's bf16 overload for a float32 output gradient gy, rounded to bf16 (FloatToBFloat16)
// as it moves into the layout the primitives take it in: the same numbers as rounding gy first and
// calling that overload, one pass over gy fewer. Returns false, having written nothing, when a wanted pass
// has no kernel or the primitives do not take gy as NHWC; the caller then rounds gy itself.
bool OneDnnConvBackwardRoundingGradient(const BFloat16* x, const BFloat16* w, const float* gy,
                                        const ConvGeometry& g, float* gx, float* gw);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CONV_ONEDNN_H_
