#include "tensor/conv_onednn.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "base/check.h"
#include "tensor/bf16_convert.h"
#include "tensor/conv_winograd.h"
#include "tensor/layout_transpose.h"
#include "tensor/threads.h"

namespace ddp {
namespace cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using DataType = memory::data_type;

const dnnl::engine& CpuEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

enum class Pass { kForward, kBackwardData, kBackwardWeights };

// Per-thread 64-byte aligned scratch for the blocked copies of one call's operands: slots 0-2 (struct
// Slots says which operand uses which). Grows to the largest layer and is reused.
void* BlockedScratch(int slot, size_t bytes) {
  struct Buffer {
    std::unique_ptr<void, decltype(&std::free)> data{nullptr, &std::free};
    size_t bytes = 0;
  };
  thread_local std::array<Buffer, 3> buffers;
  Buffer& buffer = buffers[slot];
  if (buffer.bytes < bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    buffer.data.reset(std::aligned_alloc(64, rounded));
    DDP_CHECK(buffer.data != nullptr)
        << "Conv2d: out of memory for " << rounded << " bytes of oneDNN scratch";
    buffer.bytes = rounded;
  }
  return buffer.data.get();
}

// Note [NHWC reorders]
// On AMX, oneDNN's bf16 convolutions pick plain NHWC (`acdb`) activations and float32 outputs rather than
// the blocked nChw16c of its AVX-512 kernels. Between NCHW and NHWC oneDNN 2.6 runs its generic reorder
// (jit:uni), which moved a 64x64x28x28 float32 output in 6.3 ms on one core of an AMX Xeon; an 8x8-tile
// transpose (tensor/layout_transpose.h) moves it in 2.4-2.8 ms, so float32 NCHW <-> NHWC conversions are
// transposes of each image's [C, H*W] matrix. For bf16 inputs oneDNN's reorder is as fast as the same
// transpose on 2-byte elements, and the weights' blocked layouts and nChw16c need oneDNN's reorders.
enum class Transposition { kNone, kNchwToNhwc, kNhwcToNchw };

// One argument of a primitive: its layout as the engine stores it (plain), the layout the primitive
// chose, and how to move between them where they differ: a transposition or oneDNN's reorder.
struct Operand {
  memory::desc user, inner;
  Transposition transposition = Transposition::kNone;
  std::optional<dnnl::reorder> reorder;  // user -> inner for inputs, inner -> user for the output

  Operand(const memory::desc& user_md, const memory::desc& inner_md, bool is_input)
      : user(user_md), inner(inner_md) {
    if (user == inner) return;
    const memory::dims dims = user.dims();
    if (dims.size() == 4 && user == memory::desc(dims, DataType::f32, Tag::abcd) &&
        inner == memory::desc(dims, DataType::f32, Tag::acdb)) {
      transposition = is_input ? Transposition::kNchwToNhwc : Transposition::kNhwcToNchw;
      return;
    }
    const auto& e = CpuEngine();
    reorder = is_input ? dnnl::reorder(dnnl::reorder::primitive_desc(e, user, e, inner))
                       : dnnl::reorder(dnnl::reorder::primitive_desc(e, inner, e, user));
  }

  bool converts() const { return transposition != Transposition::kNone || reorder.has_value(); }
};

// Moves `op`'s tensor between its two layouts (Note [NHWC reorders]): user -> inner for an input, inner
// -> user for the output; `from` and `to` are the two arrays.
void Convert(const Operand& op, memory from, memory to, dnnl::stream& stream) {
  if (op.reorder) {
    op.reorder->execute(stream, from, to);
    return;
  }
  const memory::dims d = op.user.dims();
  const int64_t n = d[0], c = d[1], pixels = d[2] * d[3];
  const bool to_nhwc = op.transposition == Transposition::kNchwToNhwc;
  const int64_t rows = to_nhwc ? c : pixels, cols = to_nhwc ? pixels : c;
  Transpose32(static_cast<const float*>(from.get_data_handle()), n, rows, cols,
              static_cast<float*>(to.get_data_handle()));
}

// A convolution primitive for one pass and shape: inputs a and b, output c (forward: src, weights, dst;
// backward-data: diff_dst, weights, diff_src; backward-weights: src, diff_dst, diff_weights).
struct Plan {
  dnnl::primitive primitive;
  Operand a, b, c;
  std::array<int, 3> arg;      // the DNNL_ARG_* of a, b, c
  int bias_arg;                // DNNL_ARG_BIAS, DNNL_ARG_DIFF_BIAS, or 0 without bias
  memory::desc bias;           // [out] float32, when bias_arg != 0
  std::string implementation;  // oneDNN's name of the kernel, e.g. "jit_wino_4x3:avx512_core"
};

struct Shapes {
  memory::dims src, weights, bias, dst, strides, padding;
};

Shapes ShapesOf(const ConvGeometry& g) {
  return {{g.n, g.c, g.h, g.w},     {g.out, g.c, g.kh, g.kw}, {g.out},
          {g.n, g.out, g.oh, g.ow}, {g.stride, g.stride},     {g.padding, g.padding}};
}

// Note [bf16 primitives on NHWC activations]
// Left to choose (`any`), oneDNN 2.6's AVX512_BF16 convolutions (CPUs without AMX, e.g. an AMD EPYC of
// family 26) pick blocked nChw16c activations, so every call reorders x or gy in and its float32 output
// out (about 20 ms of a resnet18 bf16 step at batch 64 on that EPYC, one core;
// bench/onednn_verbose_summary.py). The same library has NHWC kernels for all three passes (`brgconv`
// forward, `jit_bf16` backward), which it runs when the activations are named `acdb`: on channels-last
// activations they run on the engine's arrays as they lie, leaving only the weights' reorders (3.6 ms),
// and there the bf16 channels-last step takes about 0.83x the NCHW step's time (bench/bf16_compare.sh;
// BENCHMARKS.md "bf16 mixed precision"). So bf16
// convolutions on channels-last activations ask for NHWC, unless oneDNN would answer with its reference
// kernel; AMX kernels pick NHWC themselves (Note [NHWC reorders]). Float32 keeps `any`: its Winograd
// kernels take only the blocked layout. NCHW activations keep `any` too: a conversion is needed there
// either way, and asking for NHWC made that EPYC's NCHW bf16 step no faster (4 interleaved rounds).
//
// The layout to request first for the activations of g's primitives by that Note: acdb (NHWC) for bf16
// operands on channels-last activations, else any (oneDNN's choice).
memory::format_tag ActivationTagToRequest(const ConvGeometry& g, DataType operand) {
  return operand == DataType::bf16 && g.channels_last ? Tag::acdb : Tag::any;
}

// The forward descriptor with `activation` as the layout of src and dst (acdb or any) and the weights'
// left to oneDNN (`any`): float32 or bf16 operands, float32 output.
dnnl::convolution_forward::primitive_desc ForwardDesc(const ConvGeometry& g, DataType operand, bool bias,
                                                      dnnl::algorithm algorithm, Tag activation) {
  const Shapes s = ShapesOf(g);
  const memory::desc src(s.src, operand, activation), weights(s.weights, operand, Tag::any);
  const memory::desc dst(s.dst, DataType::f32, activation);
  const memory::desc bias_md = bias ? memory::desc(s.bias, DataType::f32, Tag::x) : memory::desc();
  const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training, algorithm, src, weights,
                                             bias_md, dst, s.strides, s.padding, s.padding);
  return dnnl::convolution_forward::primitive_desc(desc, CpuEngine());
}

memory::desc Plain(const memory::dims& dims, DataType type) {
  return memory::desc(dims, type, dims.size() == 4 ? Tag::abcd : Tag::a);
}

// An activation (x, y or a gradient of one) as the engine stores it: NCHW, or NHWC for channels-last.
memory::desc Activation(const memory::dims& dims, DataType type, const ConvGeometry& g) {
  return memory::desc(dims, type, g.channels_last ? Tag::acdb : Tag::abcd);
}

// The plan of one pass, its activations requested in layout `activation` (acdb or any).
Plan MakePlan(Pass pass, const ConvGeometry& g, DataType operand, bool bias, dnnl::algorithm algorithm,
              Tag activation) {
  const Shapes s = ShapesOf(g);
  const auto fwd = ForwardDesc(g, operand, bias && pass == Pass::kForward, algorithm, activation);
  const auto& e = CpuEngine();
  if (pass == Pass::kForward) {
    return Plan{dnnl::convolution_forward(fwd),
                Operand(Activation(s.src, operand, g), fwd.src_desc(), true),
                Operand(Plain(s.weights, operand), fwd.weights_desc(), true),
                Operand(Activation(s.dst, DataType::f32, g), fwd.dst_desc(), false),
                {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
                bias ? DNNL_ARG_BIAS : 0,
                Plain(s.bias, DataType::f32),
                fwd.impl_info_str()};
  }
  const memory::desc src(s.src, pass == Pass::kBackwardData ? DataType::f32 : operand, activation);
  const memory::desc weights(s.weights, pass == Pass::kBackwardData ? operand : DataType::f32, Tag::any);
  const memory::desc dst(s.dst, operand, activation);
  if (pass == Pass::kBackwardData) {
    const dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(algorithm, src, weights, dst, s.strides, s.padding, s.padding),
        e, fwd);
    return Plan{dnnl::convolution_backward_data(pd),
                Operand(Activation(s.dst, operand, g), pd.diff_dst_desc(), true),
                Operand(Plain(s.weights, operand), pd.weights_desc(), true),
                Operand(Activation(s.src, DataType::f32, g), pd.diff_src_desc(), false),
                {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
                0,
                Plain(s.bias, DataType::f32),
                pd.impl_info_str()};
  }
  const auto desc = bias ? dnnl::convolution_backward_weights::desc(
                               algorithm, src, weights, memory::desc(s.bias, DataType::f32, Tag::x), dst,
                               s.strides, s.padding, s.padding)
                         : dnnl::convolution_backward_weights::desc(algorithm, src, weights, dst, s.strides,
                                                                    s.padding, s.padding);
  const dnnl::convolution_backward_weights::primitive_desc pd(desc, e, fwd);
  return Plan{dnnl::convolution_backward_weights(pd),
              Operand(Activation(s.src, operand, g), pd.src_desc(), true),
              Operand(Activation(s.dst, operand, g), pd.diff_dst_desc(), true),
              Operand(Plain(s.weights, DataType::f32), pd.diff_weights_desc(), false),
              {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS},
              bias ? DNNL_ARG_DIFF_BIAS : 0,
              Plain(s.bias, DataType::f32),
              pd.impl_info_str()};
}

// The plan for one pass and shape with the algorithm ConvKernelFor(g) names, the direct one where oneDNN
// has no Winograd kernel for the case, or null when it has neither (dnnl_unimplemented).
std::unique_ptr<Plan> NewPlan(Pass pass, const ConvGeometry& g, DataType operand, bool bias) {
  if (ConvKernelFor(g) == ConvKernel::kWinograd && operand == DataType::f32) {
    try {
      return std::make_unique<Plan>(
          MakePlan(pass, g, operand, bias, dnnl::algorithm::convolution_winograd, Tag::any));
    } catch (const dnnl::error&) {
      // No Winograd kernel for this case on this CPU: the direct primitives below.
    }
  }
  const auto direct = dnnl::algorithm::convolution_direct;
  const Tag requested = ActivationTagToRequest(g, operand);  // Note [bf16 primitives on NHWC activations]
  if (requested != Tag::any) {
    try {
      auto plan = std::make_unique<Plan>(MakePlan(pass, g, operand, bias, direct, requested));
      if (plan->implementation.rfind("ref", 0) != 0) return plan;
    } catch (const dnnl::error&) {
      // No kernel for NHWC activations: the layouts oneDNN picks, below.
    }
  }
  try {
    return std::make_unique<Plan>(MakePlan(pass, g, operand, bias, direct, Tag::any));
  } catch (const dnnl::error&) {
    return nullptr;  // the caller runs im2col
  }
}

// The cached plan of one pass and shape on this thread at its current kernel thread count, or null when
// oneDNN has none (the failure is cached too, so an unsupported case costs one attempt per thread). The
// thread count is part of the key because oneDNN fixes a primitive's team size when it creates it: a plan
// made before a SetNumThreads would go on running the old count of threads.
const Plan* FindPlan(Pass pass, const ConvGeometry& g, DataType operand, bool bias) {
  if (g.n == 0 || g.c == 0 || g.out == 0 || g.oh <= 0 || g.ow <= 0) return nullptr;  // im2col's edge cases
  using Key = std::array<int64_t, 15>;
  thread_local std::map<Key, std::unique_ptr<Plan>> plans;
  const Key key{static_cast<int64_t>(pass),
                static_cast<int64_t>(operand),
                g.n,
                g.c,
                g.h,
                g.w,
                g.out,
                g.kh,
                g.kw,
                g.stride,
                g.padding,
                bias ? 1 : 0,
                static_cast<int64_t>(ConvKernelFor(g)),
                g.channels_last ? 1 : 0,
                GetNumThreads()};
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, NewPlan(pass, g, operand, bias)).first;
  return it->second.get();
}

dnnl::stream& Stream() {
  thread_local dnnl::stream stream(CpuEngine());
  return stream;
}

// The memory an input operand is read from: the user's array, or its reordered copy in scratch `slot`.
memory InputMemory(const Operand& op, const void* data, int slot, dnnl::stream& stream) {
  memory user(op.user, CpuEngine(), const_cast<void*>(data));
  if (!op.converts()) return user;
  memory inner(op.inner, CpuEngine(), BlockedScratch(slot, op.inner.get_size()));
  Convert(op, user, inner, stream);
  return inner;
}

// The scratch slots of a primitive's operands a, b, c (each distinct).
struct Slots {
  int a = 0, b = 1, c = 2;
};

// Runs `plan` on inputs a, b and output c (plain arrays), reordering where the primitive's layouts differ.
// An input given as `ready_a` / `ready_b` (non-null) is already in the primitive's layout and is used as
// it is; its plain array is then not read.
void Run(const Plan& plan, const void* a, const void* b, void* c, const float* bias, Slots slots = {},
         const memory* ready_a = nullptr, const memory* ready_b = nullptr) {
  dnnl::stream& stream = Stream();
  memory ma = ready_a != nullptr ? *ready_a : InputMemory(plan.a, a, slots.a, stream);
  memory mb = ready_b != nullptr ? *ready_b : InputMemory(plan.b, b, slots.b, stream);
  memory user_c(plan.c.user, CpuEngine(), c);
  memory mc = plan.c.converts()
                  ? memory(plan.c.inner, CpuEngine(), BlockedScratch(slots.c, plan.c.inner.get_size()))
                  : user_c;
  std::unordered_map<int, memory> args{{plan.arg[0], ma}, {plan.arg[1], mb}, {plan.arg[2], mc}};
  if (plan.bias_arg != 0) {
    args.emplace(plan.bias_arg, memory(plan.bias, CpuEngine(), const_cast<float*>(bias)));
  }
  plan.primitive.execute(stream, args);
  stream.wait();
  if (plan.c.converts()) {
    Convert(plan.c, mc, user_c, stream);
    stream.wait();
  }
}

template <typename T>
constexpr DataType OperandType() {
  return std::is_same_v<T, float> ? DataType::f32 : DataType::bf16;
}

// Note [Forward in image chunks]
// A primitive's reordered operands (the blocked input and output in scratch slots) and oneDNN's own
// scratchpad grow with its batch, and both stay allocated on the thread for reuse: one resnet18 forward of
// 1,000 images left about 1 GB of them, more than its activations. Each image's output depends on that
// image alone, so a batch above kForwardChunkImages runs as chunks of that many images, each through the
// plan for its size: the scratch stays that of a training batch, while a chunk is still large enough to
// keep the primitive's per-call costs (the weights' reorder, its set-up) small. Batches at or below it (the
// training batches) run as one call. The backward passes are not chunked: the weight gradient sums over
// the batch, and training batches are small.
constexpr int64_t kForwardChunkImages = 128;

template <typename T>
bool Forward(const T* x, const T* w, const float* b, const ConvGeometry& g, float* y) {
  if constexpr (std::is_same_v<T, float>) {
    if (WinogradAvx2Runs(g)) {
      WinogradAvx2Forward(x, w, b, g, y);
      return true;
    }
  }
  const int64_t x_image = g.c * g.h * g.w, y_image = g.out * g.oh * g.ow;
  for (int64_t first = 0; first < g.n; first += kForwardChunkImages) {
    ConvGeometry chunk = g;
    chunk.n = std::min(kForwardChunkImages, g.n - first);
    const Plan* plan = FindPlan(Pass::kForward, chunk, OperandType<T>(), b != nullptr);
    if (plan == nullptr) return false;  // the caller's fallback writes all of y
    Run(*plan, x + first * x_image, w, y + first * y_image, b);
  }
  return true;
}

template <typename T>
bool BackwardData(const T* w, const T* gy, const ConvGeometry& g, float* gx) {
  if constexpr (std::is_same_v<T, float>) {
    if (WinogradAvx2Runs(g)) {
      WinogradAvx2BackwardData(w, gy, g, gx);
      return true;
    }
  }
  const Plan* plan = FindPlan(Pass::kBackwardData, g, OperandType<T>(), false);
  if (plan == nullptr) return false;
  Run(*plan, gy, w, gx, nullptr);
  return true;
}

template <typename T>
bool BackwardWeights(const T* x, const T* gy, const ConvGeometry& g, float* gw, float* gb) {
  if constexpr (std::is_same_v<T, float>) {
    if (WinogradAvx2Runs(g) && gb == nullptr) {
      WinogradAvx2BackwardWeights(x, gy, g, gw);
      return true;
    }
  }
  const Plan* plan = FindPlan(Pass::kBackwardWeights, g, OperandType<T>(), gb != nullptr);
  if (plan == nullptr) return false;
  Run(*plan, x, gy, gw, gb);
  return true;
}

// The plans of the wanted backward passes (gx, gw non-null: wanted), or nullopt when one has no primitive.
struct BackwardPlans {
  const Plan* data = nullptr;     // null: gx not wanted
  const Plan* weights = nullptr;  // null: gw not wanted
};
std::optional<BackwardPlans> FindBackwardPlans(const ConvGeometry& g, DataType operand, const float* gx,
                                               const float* gw) {
  BackwardPlans plans;
  if (gx != nullptr && (plans.data = FindPlan(Pass::kBackwardData, g, operand, false)) == nullptr) {
    return std::nullopt;
  }
  if (gw != nullptr && (plans.weights = FindPlan(Pass::kBackwardWeights, g, operand, false)) == nullptr) {
    return std::nullopt;
  }
  return plans;
}

// Runs the plans, gy given in the primitives' layout as `ready` (null: each reorders its own copy): backward-
// data reorders w into slot 1 and writes gx's blocked copy in slot 2, and backward-weights, after it, reuses
// slot 2 for x and slot 1 for gw, so a gradient shared in slot 0 costs no scratch beyond the separate
// passes'.
template <typename T>
void RunBackwardPlans(const BackwardPlans& plans, const T* x, const T* w, const T* gy, const memory* ready,
                      float* gx, float* gw) {
  if (plans.data != nullptr) Run(*plans.data, gy, w, gx, nullptr, Slots{0, 1, 2}, ready, nullptr);
  if (plans.weights != nullptr) Run(*plans.weights, x, gy, gw, nullptr, Slots{2, 0, 1}, nullptr, ready);
}

// Both backward passes from one output gradient (Note [Conv2d kernel choice]): where both primitives
// take gy in the same blocked layout it is reordered once, into slot 0 (RunBackwardPlans).
template <typename T>
bool BackwardBoth(const T* x, const T* w, const T* gy, const ConvGeometry& g, float* gx, float* gw) {
  if constexpr (std::is_same_v<T, float>) {
    if (WinogradAvx2Runs(g)) {
      if (gx != nullptr) WinogradAvx2BackwardData(w, gy, g, gx);
      if (gw != nullptr) WinogradAvx2BackwardWeights(x, gy, g, gw);
      return true;
    }
  }
  const std::optional<BackwardPlans> plans = FindBackwardPlans(g, OperandType<T>(), gx, gw);
  if (!plans) return false;
  std::optional<memory> shared;
  if (plans->data != nullptr && plans->weights != nullptr &&
      plans->data->a.inner == plans->weights->b.inner) {
    shared = InputMemory(plans->data->a, gy, 0, Stream());
  }
  RunBackwardPlans(*plans, x, w, gy, shared ? &*shared : nullptr, gx, gw);
  return true;
}

// BackwardBoth for bf16 primitives from a float32 gy, rounded to bf16 as it is transposed into the NHWC
// layout both primitives take it in (TransposeToBFloat16: one pass instead of a rounding pass and a
// reorder). False, having written nothing, when a wanted pass has no primitive or the primitives take gy
// in another layout.
bool BackwardBothRoundingGradient(const BFloat16* x, const BFloat16* w, const float* gy,
                                  const ConvGeometry& g, float* gx, float* gw) {
  const std::optional<BackwardPlans> plans = FindBackwardPlans(g, DataType::bf16, gx, gw);
  if (!plans || (plans->data == nullptr && plans->weights == nullptr)) return false;
  const memory::desc nhwc(ShapesOf(g).dst, DataType::bf16, Tag::acdb);
  if ((plans->data != nullptr && plans->data->a.inner != nhwc) ||
      (plans->weights != nullptr && plans->weights->b.inner != nhwc)) {
    return false;
  }
  memory ready(nhwc, CpuEngine(), BlockedScratch(0, nhwc.get_size()));
  BFloat16* rounded = static_cast<BFloat16*>(ready.get_data_handle());
  if (g.channels_last) {
    FloatToBFloat16Array(gy, rounded, g.n * g.out * g.oh * g.ow);  // already NHWC
  } else {
    TransposeToBFloat16(gy, g.n, g.out, g.oh * g.ow, rounded);
  }
  RunBackwardPlans<BFloat16>(*plans, x, w, nullptr, &ready, gx, gw);
  return true;
}

}  // namespace

std::string OneDnnConvImplementation(const ConvGeometry& g) {
  if (ConvKernelFor(g) == ConvKernel::kIm2Col) return "im2col";
  if (WinogradAvx2Runs(g)) return "winograd_avx2";
  const Plan* plan = FindPlan(Pass::kForward, g, DataType::f32, false);
  return plan != nullptr ? plan->implementation : "im2col";
}

bool OneDnnConvForward(const float* x, const float* w, const float* b, const ConvGeometry& g, float* y) {
  return Forward(x, w, b, g, y);
}
bool OneDnnConvForward(const BFloat16* x, const BFloat16* w, const float* b, const ConvGeometry& g,
                       float* y) {
  return Forward(x, w, b, g, y);
}
bool OneDnnConvBackwardData(const float* w, const float* gy, const ConvGeometry& g, float* gx) {
  return BackwardData(w, gy, g, gx);
}
bool OneDnnConvBackwardData(const BFloat16* w, const BFloat16* gy, const ConvGeometry& g, float* gx) {
  return BackwardData(w, gy, g, gx);
}
bool OneDnnConvBackwardWeights(const float* x, const float* gy, const ConvGeometry& g, float* gw, float* gb) {
  return BackwardWeights(x, gy, g, gw, gb);
}
bool OneDnnConvBackwardWeights(const BFloat16* x, const BFloat16* gy, const ConvGeometry& g, float* gw,
                               float* gb) {
  return BackwardWeights(x, gy, g, gw, gb);
}

bool OneDnnConvBackward(const float* x, const float* w, const float* gy, const ConvGeometry& g, float* gx,
                        float* gw) {
  return BackwardBoth(x, w, gy, g, gx, gw);
}
bool OneDnnConvBackward(const BFloat16* x, const BFloat16* w, const BFloat16* gy, const ConvGeometry& g,
                        float* gx, float* gw) {
  return BackwardBoth(x, w, gy, g, gx, gw);
}
bool OneDnnConvBackwardRoundingGradient(const BFloat16* x, const BFloat16* w, const float* gy,
                                        const ConvGeometry& g, float* gx, float* gw) {
  return BackwardBothRoundingGradient(x, w, gy, g, gx, gw);
}

}  // namespace cpu
}  // namespace ddp
