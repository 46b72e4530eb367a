// The kernel-choice rules that tensor/conv_onednn.h declares (Note [Conv2d kernel choice] and the Notes
// after it); the passes themselves are in tensor/conv_onednn.cc.
#include <oneapi/dnnl/dnnl.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "base/environment_choice.h"
#include "tensor/conv_onednn.h"
#include "tensor/conv_winograd.h"
#include "tensor/cpu_gemm_bf16.h"

namespace ddp {
namespace cpu {
namespace {

std::atomic<ConvKernel> requested_kernel{ConvKernel::kAuto};
// SetBf16InputGradientAsForward's choice: -1 none (the environment's), 0 off, 1 on.
std::atomic<int> requested_input_gradient_as_forward{-1};
std::atomic<Bf16Winograd> requested_bf16_winograd{Bf16Winograd::kAuto};

// The choice DDP_BF16_CONV_WINOGRAD makes (Note [bf16 convolutions on float32 Winograd]): kAuto where it
// is unset, empty or "auto", kNever for "off", kAlways for "on".
Bf16Winograd Bf16WinogradFromEnvironment() {
  static const Bf16Winograd resolved = std::array<Bf16Winograd, 3>{
      Bf16Winograd::kAuto, Bf16Winograd::kNever,
      Bf16Winograd::kAlways}[EnvironmentChoice("DDP_BF16_CONV_WINOGRAD", {"auto", "off", "on"})];
  return resolved;
}

// The kernel DDP_CONV_KERNEL forces, or kAuto (Note [Conv2d kernel choice]).
ConvKernel FromEnvironment() {
  static const ConvKernel resolved =
      std::array<ConvKernel, 5>{ConvKernel::kAuto, ConvKernel::kOneDnn, ConvKernel::kWinograd,
                                ConvKernel::kIm2Col, ConvKernel::kWinogradAvx2}[EnvironmentChoice(
          "DDP_CONV_KERNEL", {"auto", "onednn", "winograd", "im2col", "winograd_avx2"})];
  return resolved;
}

// True where oneDNN runs AVX-512 kernels (its effective ISA, which ONEDNN_MAX_CPU_ISA can lower): only
// there does oneDNN 2.6 have float32 Winograd primitives.
bool OneDnnRunsAvx512() {
  static const bool avx512 = (static_cast<unsigned>(dnnl_get_effective_cpu_isa()) &
                              dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
  return avx512;
}

// The kernel forced by SetConvKernel or DDP_CONV_KERNEL, or kAuto.
ConvKernel ForcedKernel() {
  const ConvKernel kernel = requested_kernel.load();
  return kernel != ConvKernel::kAuto ? kernel : FromEnvironment();
}

// The shapes Note [bf16 convolutions on float32 Winograd] gives to float32 Winograd on a CPU whose bf16
// instructions are AVX512_BF16 without AMX (false on any other CPU).
bool Float32WinogradBeatsAvx512Bf16(const ConvGeometry& g) {
  static const bool avx512_bf16 = std::strcmp(Bf16Instructions(), "avx512_bf16") == 0;
  constexpr int64_t kTileSide = 4, kMinSide = 8, kMinChannels = 256, kMinTiles = 256;
  if (!avx512_bf16 || g.oh % kTileSide != 0 || g.ow % kTileSide != 0) return false;
  if (g.oh < kMinSide || g.ow < kMinSide) return false;
  const int64_t tiles = g.n * (g.oh / kTileSide) * (g.ow / kTileSide);
  return g.c >= kMinChannels && g.out >= kMinChannels && tiles >= kMinTiles;
}

}  // namespace

bool WinogradAvx2Runs(const ConvGeometry& g) {
  static const bool switched_off = EnvironmentSwitch("DDP_CONV_WINOGRAD_AVX2", "1", "0");
  const ConvKernel kernel = ConvKernelFor(g);
  if (kernel == ConvKernel::kWinogradAvx2) return WinogradAvx2Fits(g);
  return kernel == ConvKernel::kWinograd && !switched_off && !OneDnnRunsAvx512() && WinogradAvx2Fits(g);
}

void SetConvKernel(ConvKernel kernel) { requested_kernel.store(kernel); }

ConvKernel ConvKernelFor(const ConvGeometry& g) {
  const ConvKernel kernel = ForcedKernel();
  if (kernel != ConvKernel::kAuto) return kernel;
  if (g.kh == 3 && g.kw == 3 && g.stride == 1 && g.c >= 16) return ConvKernel::kWinograd;
  return g.kh * g.kw > 1 && g.c >= 8 ? ConvKernel::kOneDnn : ConvKernel::kIm2Col;
}

bool Bf16WeightGradientOnIm2Col(const ConvGeometry& g) {
  constexpr int64_t kMaxOutputPixels = 64;
  return ForcedKernel() == ConvKernel::kAuto && g.oh * g.ow <= kMaxOutputPixels;
}

bool Float32WeightGradientOnIm2Col(const ConvGeometry& g) {
  enum Choice { kAuto, kPrimitive, kIm2Col };  // DDP_CONV_WEIGHT_GRAD's values, in this order
  static const size_t choice = EnvironmentChoice("DDP_CONV_WEIGHT_GRAD", {"auto", "primitive", "im2col"});
  if (ForcedKernel() != ConvKernel::kAuto || g.kh * g.kw == 1) return false;
  return choice == kAuto ? !OneDnnRunsAvx512() && !WinogradAvx2Runs(g) : choice == kIm2Col;
}

bool Bf16ForwardOnIm2Col() {
  static const bool on_primitive = EnvironmentSwitch("DDP_BF16_CONV_FORWARD", "im2col", "primitive");
  return ForcedKernel() == ConvKernel::kAuto && !on_primitive;
}

void SetBf16InputGradientAsForward(bool on) { requested_input_gradient_as_forward.store(on ? 1 : 0); }

bool Bf16InputGradientAsForward(const ConvGeometry& g) {
  static const bool from_environment = EnvironmentSwitch("DDP_BF16_CONV_INPUT_GRAD", "primitive", "forward");
  const int requested = requested_input_gradient_as_forward.load();
  const bool on = requested >= 0 ? requested == 1 : from_environment;
  constexpr int64_t kMaxOutputPixels = 16;
  return on && ForcedKernel() == ConvKernel::kAuto && g.stride == 1 && g.kh == g.kw && g.padding < g.kh &&
         g.oh * g.ow <= kMaxOutputPixels;
}

void SetBf16Winograd(Bf16Winograd choice) { requested_bf16_winograd.store(choice); }

bool Bf16ConvOnFloat32Primitives(const ConvGeometry& g) {
  if (ActiveBf16GemmKernel() != Bf16GemmKernel::kOneDnn) return true;
  if (ConvKernelFor(g) != ConvKernel::kWinograd) return false;
  Bf16Winograd choice = requested_bf16_winograd.load();
  if (choice == Bf16Winograd::kAuto) choice = Bf16WinogradFromEnvironment();
  if (choice != Bf16Winograd::kAuto) return choice == Bf16Winograd::kAlways;
  return Float32WinogradBeatsAvx512Bf16(g);
}

}  // namespace cpu
}  // namespace ddp
