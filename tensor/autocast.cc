#include "tensor/autocast.h"

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <utility>

#include "base/check.h"
#include "tensor/bf16_convert.h"
#include "tensor/cpu_elementwise.h"
#include "tensor/function_node.h"
#include "tensor/half_convert.h"
#include "tensor/memory_format.h"
#include "tensor/ops.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_ops.h"
#endif

namespace ddp {
namespace {

// One thread's autocast state (Note [Autocast]).
struct AutocastState {
  bool enabled = false;
  DType dtype = DType::kBFloat16;  // of the innermost scope
  int depth = 0;                   // open scopes, enabled or not
  // Leaf -> its bf16 copy (CUDA: its bf16 or fp16 copy). The weak pointer tells a live leaf from a new tensor
  // at a reused address.
  std::unordered_map<const TensorImpl*, std::pair<std::weak_ptr<TensorImpl>, Tensor>> cache;
  // The same for fp16 autocast: leaf -> its float16-rounded float32 copy (with the pass-through node).
  std::unordered_map<const TensorImpl*, std::pair<std::weak_ptr<TensorImpl>, Tensor>> fp16_cache;
  AutocastCacheCounters counters;
};

AutocastState& State() {
  thread_local AutocastState state;
  return state;
}

}  // namespace

AutocastScope::AutocastScope(bool enabled, DType dtype) {
  DDP_CHECK(dtype == DType::kBFloat16 || dtype == DType::kFloat16)
      << "AutocastScope: dtype must be bfloat16 or float16, got " << DTypeName(dtype);
  AutocastState& state = State();
  previous_ = state.enabled;
  previous_dtype_ = state.dtype;
  state.enabled = enabled;
  if (enabled) state.dtype = dtype;
  ++state.depth;
}

AutocastScope::~AutocastScope() {
  AutocastState& state = State();
  state.enabled = previous_;
  state.dtype = previous_dtype_;
  if (--state.depth == 0) {
    state.cache.clear();
    state.fp16_cache.clear();
  }
}

bool AutocastEnabled() { return State().enabled; }

AutocastSettings CurrentAutocastSettings() {
  const AutocastState& state = State();
  return {state.enabled, state.dtype};
}

bool AutocastAppliesTo(const Tensor& first_input) {
  const AutocastState& state = State();
  return state.enabled && state.dtype == DType::kBFloat16 && first_input.device().is_cpu();
}

bool AutocastFp16AppliesTo(const Tensor& first_input) {
  const AutocastState& state = State();
  return state.enabled && state.dtype == DType::kFloat16 && first_input.device().is_cpu();
}

bool AutocastCudaAppliesTo(const Tensor& first_input) {
  return State().enabled && first_input.device().is_cuda();
}

DType AutocastDType() {
  DDP_CHECK(State().enabled) << "AutocastDType outside an enabled AutocastScope";
  return State().dtype;
}

Tensor ToLowPrecisionContiguous(const Tensor& x, DType dtype) {
  DDP_CHECK(dtype == DType::kBFloat16 || dtype == DType::kFloat16)
      << "low-precision cast: dtype must be bfloat16 or float16, got " << DTypeName(dtype);
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) return cuda::RoundToLowPrecision(x.Detach(), dtype);
#endif
  if (dtype == DType::kBFloat16) return ToBFloat16Contiguous(x);
  DDP_CHECK(x.dtype() == DType::kFloat32 && x.device().is_cpu())
      << "fp16 cast: expects a float32 CPU tensor, got " << DTypeName(x.dtype()) << " on "
      << x.device().ToString();
  const Tensor source = Contiguous(x.Detach());
  Tensor out = Tensor::Empty(x.shape(), DType::kFloat16);
  cpu::FloatToHalfRun(source.data<float>(), static_cast<uint16_t*>(out.raw_data()), x.numel());
  return out;
}

Tensor ToBFloat16Contiguous(const Tensor& x) {
  DDP_CHECK(x.dtype() == DType::kFloat32 && x.device().is_cpu())
      << "bf16 cast: expects a float32 CPU tensor, got " << DTypeName(x.dtype()) << " on "
      << x.device().ToString();
  const Tensor source = Contiguous(x.Detach());
  Tensor out = Tensor::Empty(x.shape(), DType::kBFloat16);
  cpu::FloatToBFloat16Array(source.data<float>(), out.data<BFloat16>(), x.numel());
  return out;
}

Tensor AttachedAutocastCopy(const Tensor& x) {
  const TensorImpl* impl = x.impl();
  if (impl->autocast_copy == nullptr || impl->autocast_copy_version != x.storage()->version())
    return Tensor();
  return Tensor(impl->autocast_copy);
}

Tensor AttachedGradientCopy(const Tensor& gy) {
  if (!IsChannelsLast(gy)) return Tensor();
  const Tensor copy = AttachedAutocastCopy(gy);
  if (copy.defined() && IsChannelsLast(copy)) {
    ++State().counters.gradient_copies;
    return copy;
  }
  return Tensor();
}

Tensor AutocastCast(const Tensor& x) {
  AutocastState& state = State();
  DDP_CHECK(state.enabled) << "AutocastCast outside an enabled AutocastScope";
  DDP_CHECK(state.dtype == DType::kBFloat16 || x.device().is_cuda())
      << "AutocastCast: an fp16 scope casts CPU tensors through AutocastFp16Call";
  const DType dtype = state.dtype;
  if (!(x.is_leaf() && x.requires_grad())) {
    const Tensor copy = dtype == DType::kBFloat16 ? AttachedAutocastCopy(x) : Tensor();
    if (copy.defined() && copy.is_contiguous()) {
      ++state.counters.attached;  // Note [Autocast copies from the producer]
      return copy;
    }
    return ToLowPrecisionContiguous(x, dtype);
  }
  auto it = state.cache.find(x.impl());
  // A nested scope of the other dtype finds a copy of the wrong dtype: a miss, replaced.
  if (it != state.cache.end() && it->second.first.lock() == x.shared_impl() &&
      it->second.second.dtype() == dtype) {
    ++state.counters.hits;
    return it->second.second;
  }
  ++state.counters.misses;
  Tensor cast = ToLowPrecisionContiguous(x, dtype);
  state.cache[x.impl()] = {x.shared_impl(), cast};
  return cast;
}

Tensor AutocastCastChannelsLast(const Tensor& x) {
  AutocastState& state = State();
  DDP_CHECK(state.enabled && state.dtype == DType::kBFloat16)
      << "AutocastCastChannelsLast outside an enabled bf16 AutocastScope";
  if (!(x.is_leaf() && x.requires_grad())) {
    const Tensor copy = AttachedAutocastCopy(x);
    if (copy.defined() && IsChannelsLast(copy)) {
      ++state.counters.attached;  // Note [Autocast copies from the producer]
      return copy;
    }
  }
  if (IsChannelsLast(x) && x.device().is_cpu() && x.dtype() == DType::kFloat32) {
    // Rounded where it lies: one pass, no layout change (not cached: an activation, not a weight).
    Tensor out = EmptyChannelsLast(x.shape(), DType::kBFloat16);
    cpu::FloatToBFloat16Array(x.data<float>(), out.data<BFloat16>(), x.numel());
    return out;
  }
  return ChannelsLastCopy(AutocastCast(x));
}

AutocastCacheCounters GetAutocastCacheCounters() { return State().counters; }

bool AutocastWantsCopyOf(const Tensor& output) {
  const AutocastState& state = State();
  return state.enabled && state.dtype == DType::kBFloat16 && output.dtype() == DType::kFloat32 &&
         output.device().is_cpu();
}

void AttachAutocastCopy(const Tensor& output, const Tensor& copy) {
  DDP_CHECK(copy.dtype() == DType::kBFloat16 && copy.device().is_cpu() &&
            cpu::SameDenseLayout(copy, output) && (copy.is_contiguous() || IsChannelsLast(copy)))
      << "AttachAutocastCopy: needs a bfloat16 CPU tensor in the layout (contiguous or channels-last) of "
         "shape "
      << ShapeToString(output.shape()) << ", got " << DTypeName(copy.dtype()) << " "
      << ShapeToString(copy.shape());
  output.impl()->autocast_copy = copy.shared_impl();
  output.impl()->autocast_copy_version = output.storage()->version();
}

// ---- fp16 (Note [fp16 autocast]) ----

namespace {

// out[i] = in[i] rounded to float16 and widened: to nearest, ties to even, the functors' bits (the CUDA
// kernels' too; tensor/low_precision_round.h), through the float16 array kernels a chunk at a time.
void RoundArrayToFloat16(const float* in, float* out, int64_t n) {
  constexpr int64_t kChunk = 512;
  uint16_t half[kChunk];
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t count = std::min(kChunk, n - begin);
    cpu::FloatToHalfRun(in + begin, half, count);
    cpu::HalfToFloatRun(half, out + begin, count);
  }
}

}  // namespace

Tensor RoundToFloat16(const Tensor& x) {
  DDP_CHECK(x.dtype() == DType::kFloat32 && x.device().is_cpu())
      << "fp16 rounding: expects a float32 CPU tensor, got " << DTypeName(x.dtype()) << " on "
      << x.device().ToString();
  const Tensor source = Contiguous(x.Detach());
  Tensor out = Tensor::Empty(x.shape(), DType::kFloat32);
  RoundArrayToFloat16(source.data<float>(), out.data<float>(), x.numel());
  return out;
}

namespace {

// x rounded to float16 (forward); the gradient passes through unchanged (backward), as PyTorch's cast
// back to float32 passes it.
Tensor RoundedOperand(const Tensor& x) {
  return RecordOp(RoundToFloat16(x), "AutocastFp16CastBackward", {&x},
                  [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

// Parameters are rounded once per outermost scope, like the bf16 casts.
Tensor CachedRoundedOperand(const Tensor& x) {
  AutocastState& state = State();
  if (!(x.is_leaf() && x.requires_grad())) return RoundedOperand(x);
  auto it = state.fp16_cache.find(x.impl());
  if (it != state.fp16_cache.end() && it->second.first.lock() == x.shared_impl()) {
    ++state.counters.hits;
    return it->second.second;
  }
  ++state.counters.misses;
  Tensor rounded = RoundedOperand(x);
  state.fp16_cache[x.impl()] = {x.shared_impl(), rounded};
  return rounded;
}

}  // namespace

Tensor AutocastFp16Call(const std::vector<Tensor>& operands,
                        const std::function<Tensor(const std::vector<Tensor>& rounded)>& op) {
  DDP_CHECK(State().enabled && State().dtype == DType::kFloat16)
      << "AutocastFp16Call outside an fp16 AutocastScope";
  std::vector<Tensor> rounded;
  rounded.reserve(operands.size());
  for (const Tensor& x : operands) rounded.push_back(CachedRoundedOperand(x));
  Tensor out;
  {
    AutocastScope float32(false);
    out = op(rounded);
  }
  // The output's values as they are; its gradient rounded to float16 before it reaches the op's backward.
  return RecordOp(out.Detach(), "AutocastFp16OutputBackward", {&out},
                  [](const Tensor& g) { return std::vector<Tensor>{RoundToFloat16(g)}; });
}

}  // namespace ddp
