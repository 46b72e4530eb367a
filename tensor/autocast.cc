#include "tensor/autocast.h"

#include <memory>
#include <unordered_map>
#include <utility>

#include "base/check.h"
#include "tensor/bf16_convert.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

// One thread's autocast state (Note [Autocast]).
struct AutocastState {
  bool enabled = false;
  int depth = 0;  // open scopes, enabled or not
  // Leaf -> its bf16 copy. The weak pointer tells a live leaf from a new tensor at a reused address.
  std::unordered_map<const TensorImpl*, std::pair<std::weak_ptr<TensorImpl>, Tensor>> cache;
  AutocastCacheCounters counters;
};

AutocastState& State() {
  thread_local AutocastState state;
  return state;
}

}  // namespace

AutocastScope::AutocastScope(bool enabled) {
  AutocastState& state = State();
  previous_ = state.enabled;
  state.enabled = enabled;
  ++state.depth;
}

AutocastScope::~AutocastScope() {
  AutocastState& state = State();
  state.enabled = previous_;
  if (--state.depth == 0) state.cache.clear();
}

bool AutocastEnabled() { return State().enabled; }

bool AutocastAppliesTo(const Tensor& first_input) { return State().enabled && first_input.device().is_cpu(); }

Tensor ToBFloat16Contiguous(const Tensor& x) {
  DDP_CHECK(x.dtype() == DType::kFloat32 && x.device().is_cpu())
      << "bf16 cast: expects a float32 CPU tensor, got " << DTypeName(x.dtype()) << " on " << x.device().ToString();
  const Tensor source = Contiguous(x.Detach());
  Tensor out = Tensor::Empty(x.shape(), DType::kBFloat16);
  cpu::FloatToBFloat16Array(source.data<float>(), out.data<BFloat16>(), x.numel());
  return out;
}

Tensor AutocastCast(const Tensor& x) {
  AutocastState& state = State();
  DDP_CHECK(state.enabled) << "AutocastCast outside an enabled AutocastScope";
  if (!(x.is_leaf() && x.requires_grad())) return ToBFloat16Contiguous(x);
  auto it = state.cache.find(x.impl());
  if (it != state.cache.end() && it->second.first.lock() == x.shared_impl()) {
    ++state.counters.hits;
    return it->second.second;
  }
  ++state.counters.misses;
  Tensor cast = ToBFloat16Contiguous(x);
  state.cache[x.impl()] = {x.shared_impl(), cast};
  return cast;
}

AutocastCacheCounters GetAutocastCacheCounters() { return State().counters; }

}  // namespace ddp
