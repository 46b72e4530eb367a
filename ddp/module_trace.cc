#include "ddp/module_trace.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tensor/autograd.h"
#include "base/check.h"

namespace ddp {

// Note [Module trace slices]
// Forward: a module's slice spans its operator() call (Note [Module call observer]); calls nest as the
// modules do.
// Backward: the engine here has no module-level backward hooks, so the tracer builds PyTorch's "full
// backward hook" from identity nodes of its own. After a call, the output gets an identity node
// (ModuleTraceNode, output side): it runs when the gradient of the module's output is complete, which is
// when the module's backward starts. Before a call, an input that requires grad gets one (input side):
// it runs once the gradient of the module's input is computed, the end of the module's backward. A
// first layer's input needs no gradient, so the end is also taken from the module's own parameters: the
// tracer's post-accumulate-grad hooks (registered after the Reducer's, so they fire after the Reducer's
// hook for the same parameter launched its bucket) note the last gradient of each module, and a
// container ends no earlier than its children. The engine runs leaf gradient sinks before any other
// ready node (Note [Backward firing order]), so a layer's parameter gradients, and the bucket launches
// they trigger, fall inside its backward slice, before the next layer's backward starts. The slices are
// written when the backward pass finishes (a backward-finished callback), since only then is every end
// known.
// Cost: nothing without a tracer; with one, two nodes and one clock read per module call and one per
// parameter gradient.

// What one module call left for its backward slice.
struct ModuleCall {
  const Module* module = nullptr;
  std::string path;
  uint64_t parent = 0;  // the enclosing traced call, 0 for none
  bool backward_started = false;
  absl::Time backward_start;
  absl::Time backward_end = absl::InfinitePast();  // the latest end evidence so far
};

struct ModuleTracer::State : std::enable_shared_from_this<ModuleTracer::State> {
  explicit State(int rank) : trace(rank) {}

  // Called by the identity nodes and the gradient hooks, inside a backward pass.
  void OnOutputGradient(uint64_t call_id);
  void OnInputGradient(uint64_t call_id);
  void OnParameterGradient(const Module* module);
  // Queues FinishBackward once per backward pass.
  void EnsureFinishQueued();
  // Writes the pass's backward slices and forgets its calls.
  void FinishBackward();

  TraceRecorder trace;
  std::unordered_map<const Module*, std::string> paths;  // every module under the root, by address
  uint64_t next_call_id = 1;
  std::map<uint64_t, ModuleCall> calls;  // calls whose graph may still run backward, by id (call order)
  std::vector<std::pair<uint64_t, absl::Time>> open;  // forward calls in progress: id (0: not traced), start
  std::unordered_map<const Module*, absl::Time> last_parameter_gradient;  // this backward pass
  bool finish_queued = false;
};

namespace {

// Calls kept without a backward pass (forwards with grad mode on whose graph was dropped) are forgotten
// beyond this many, so a long evaluation with grad mode on cannot grow the tracer without bound.
constexpr size_t kMaxPendingCalls = 1 << 16;

// An identity on the gradient path of a module's output or input that tells the tracer when it runs.
class ModuleTraceNode : public Node {
 public:
  ModuleTraceNode(std::weak_ptr<ModuleTracer::State> state, uint64_t call_id, bool output_side)
      : state_(std::move(state)), call_id_(call_id), output_side_(output_side) {}

  std::vector<Tensor> Apply(const Tensor& grad_output) override {
    if (std::shared_ptr<ModuleTracer::State> state = state_.lock()) {
      if (output_side_) {
        state->OnOutputGradient(call_id_);
      } else {
        state->OnInputGradient(call_id_);
      }
    }
    return {grad_output};
  }
  std::string name() const override { return output_side_ ? "ModuleOutputTrace" : "ModuleInputTrace"; }

 private:
  std::weak_ptr<ModuleTracer::State> state_;
  uint64_t call_id_;
  bool output_side_;
};

// An alias of `t` (same data) whose gradient passes through a ModuleTraceNode.
Tensor WithTraceNode(const Tensor& t, std::weak_ptr<ModuleTracer::State> state, uint64_t call_id,
                     bool output_side) {
  Tensor alias = t.Detach();
  SetHistory(alias, std::make_shared<ModuleTraceNode>(std::move(state), call_id, output_side), {&t});
  return alias;
}

bool NeedsTraceNode(const Tensor& t) { return GradModeEnabled() && t.defined() && t.requires_grad(); }

// The observer installed on the training thread: forward slices, and identity nodes for backward.
class TracingObserver : public ModuleCallObserver {
 public:
  explicit TracingObserver(std::shared_ptr<ModuleTracer::State> state) : state_(std::move(state)) {}

  Tensor BeforeForward(const Module& module, const Tensor& input) override {
    ModuleTracer::State& s = *state_;
    auto path = s.paths.find(&module);
    if (path == s.paths.end()) {
      s.open.emplace_back(0, absl::Now());
      return input;
    }
    if (s.calls.size() >= kMaxPendingCalls) s.calls.clear();
    const uint64_t id = s.next_call_id++;
    ModuleCall& call = s.calls[id];
    call.module = &module;
    call.path = path->second;
    for (auto it = s.open.rbegin(); it != s.open.rend(); ++it) {
      if (it->first != 0) {
        call.parent = it->first;
        break;
      }
    }
    s.open.emplace_back(id, absl::Now());
    return NeedsTraceNode(input) ? WithTraceNode(input, state_, id, /*output_side=*/false) : input;
  }

  Tensor AfterForward(const Module& module, const Tensor& output) override {
    ModuleTracer::State& s = *state_;
    DDP_CHECK(!s.open.empty()) << "ModuleTracer: AfterForward without BeforeForward";
    const auto [id, start] = s.open.back();
    s.open.pop_back();
    if (id == 0) return output;
    auto call = s.calls.find(id);
    if (call == s.calls.end()) return output;  // forgotten (kMaxPendingCalls)
    s.trace.Span(absl::StrCat("forward ", call->second.path), TraceRecorder::kModuleTrack, start, absl::Now());
    if (!NeedsTraceNode(output)) {
      s.calls.erase(call);  // no backward through this call
      return output;
    }
    return WithTraceNode(output, state_, id, /*output_side=*/true);
  }

 private:
  std::shared_ptr<ModuleTracer::State> state_;
};

// Every module under `module` (itself included) with its dotted path; the root is named by its type.
void CollectPaths(const Module& module, const std::string& path,
                  std::unordered_map<const Module*, std::string>* paths) {
  paths->emplace(&module, path.empty() ? module.type_name() : path);
  for (const auto& [name, child] : module.NamedChildren()) {
    CollectPaths(*child, path.empty() ? name : absl::StrCat(path, ".", name), paths);
  }
}

}  // namespace

void ModuleTracer::State::OnOutputGradient(uint64_t call_id) {
  EnsureFinishQueued();
  auto call = calls.find(call_id);
  if (call == calls.end() || call->second.backward_started) return;
  call->second.backward_started = true;
  call->second.backward_start = absl::Now();
}

void ModuleTracer::State::OnInputGradient(uint64_t call_id) {
  EnsureFinishQueued();
  auto call = calls.find(call_id);
  if (call != calls.end()) call->second.backward_end = std::max(call->second.backward_end, absl::Now());
}

void ModuleTracer::State::OnParameterGradient(const Module* module) {
  EnsureFinishQueued();
  last_parameter_gradient[module] = absl::Now();
}

void ModuleTracer::State::EnsureFinishQueued() {
  if (finish_queued) return;
  finish_queued = true;
  std::weak_ptr<State> weak = weak_from_this();
  QueueBackwardFinishedCallback([weak] {
    if (std::shared_ptr<State> state = weak.lock()) state->FinishBackward();
  });
}

void ModuleTracer::State::FinishBackward() {
  // Children were called after their parents (higher ids): walking down the ids, each call's end is
  // final before it is folded into its parent's.
  for (auto it = calls.rbegin(); it != calls.rend(); ++it) {
    ModuleCall& call = it->second;
    if (!call.backward_started) continue;
    auto own = last_parameter_gradient.find(call.module);
    if (own != last_parameter_gradient.end()) call.backward_end = std::max(call.backward_end, own->second);
    const absl::Time end = std::max(call.backward_end, call.backward_start);
    trace.Span(absl::StrCat("backward ", call.path), TraceRecorder::kModuleTrack, call.backward_start, end);
    auto parent = calls.find(call.parent);
    if (parent != calls.end()) parent->second.backward_end = std::max(parent->second.backward_end, end);
  }
  calls.clear();
  last_parameter_gradient.clear();
  finish_queued = false;
}

ModuleTracer::ModuleTracer(const Module& root, int rank) : state_(std::make_shared<State>(rank)) {
  CollectPaths(root, "", &state_->paths);
  std::weak_ptr<State> weak = state_;
  for (const auto& [module, path] : state_->paths) {
    for (const auto& [name, parameter] : module->NamedParameters()) {
      if (name.find('.') != std::string::npos) continue;  // a descendant's
      const Module* owner = module;
      const int id = parameter.RegisterPostAccumulateGradHook([weak, owner](const Tensor&) {
        if (std::shared_ptr<State> state = weak.lock()) state->OnParameterGradient(owner);
      });
      hooks_.emplace_back(parameter, id);
    }
  }
  observer_ = std::make_unique<TracingObserver>(state_);
  previous_observer_ = SetModuleCallObserver(observer_.get());
}

ModuleTracer::~ModuleTracer() {
  SetModuleCallObserver(previous_observer_);
  for (const auto& [parameter, id] : hooks_) parameter.RemovePostAccumulateGradHook(id);
}

const TraceRecorder& ModuleTracer::trace() const { return state_->trace; }

}  // namespace ddp
