// The backward engine. See Note [Backward firing order] in autograd.h.
#include "tensor/autograd.h"

#include <atomic>
#include <queue>
#include <unordered_map>
#include <utility>

#include "tensor/cpu_elementwise.h"
#include "tensor/memory_format.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

std::atomic<uint64_t> next_sequence_nr{0};
thread_local bool grad_mode_enabled = true;

// Callbacks queued during the pass running on this thread (null outside a pass).
thread_local std::vector<std::function<void()>>* backward_callbacks = nullptr;

struct ReadyOrder {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->sequence_nr < b->sequence_nr;  // max-heap: highest sequence number first
  }
};

// Counts, for every node reachable from `root`, the edges that point at it.
std::unordered_map<Node*, int> CountDependencies(Node* root) {
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack = {root};
  std::unordered_map<Node*, bool> seen = {{root, true}};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges) {
      Node* child = edge.node.get();
      if (child == nullptr) continue;
      ++dependencies[child];
      if (!seen[child]) {
        seen[child] = true;
        stack.push_back(child);
      }
    }
  }
  return dependencies;
}

// True when the sum buffer + gradient may be written into `buffer` (as PyTorch's input buffers do): this
// handle is the only one on the tensor and on its memory, so no one else sees it change, and the sum has
// its shape, layout, dtype and device. AddInPlace then writes Add's bits (each element buffer + gradient).
// Both contiguous, or on the CPU both in one dense layout (channels-last gradients, Note [Channels-last
// activations]), which the sum keeps.
bool CanSumInPlace(const Tensor& buffer, const Tensor& gradient) {
  return buffer.shared_impl().use_count() == 1 && buffer.storage().use_count() == 1 &&
         cpu::SameDenseLayout(buffer, gradient) && (buffer.is_contiguous() || buffer.device().is_cpu()) &&
         buffer.dtype() == gradient.dtype() && buffer.device() == gradient.device();
}

// Adds `gradient` into the input buffer of a node (sums gradients arriving over several edges).
void AccumulateIntoBuffer(Tensor& buffer, const Tensor& gradient) {
  if (!gradient.defined()) return;
  if (!buffer.defined()) {
    buffer = gradient;
  } else if (CanSumInPlace(buffer, gradient)) {
    AddInPlace(buffer, gradient);
  } else {
    buffer = Add(buffer, gradient);
  }
}

// True when a leaf without a gradient may take `gradient` itself as its .grad instead of a copy (as
// PyTorch's AccumulateGrad steals it): the backward pass's handle is the only one on the tensor and on its
// memory, which it covers exactly, laid out as the copy would be (contiguous, or channels-last for a
// channels-last leaf), with the leaf's dtype and device, and no graph of its own.
bool CanTakeGradient(const Tensor& gradient, const Tensor& leaf, bool channels_last) {
  const TensorImpl& impl = *gradient.shared_impl();
  return gradient.shared_impl().use_count() == 1 && impl.storage.use_count() == 1 && impl.offset == 0 &&
         impl.storage->nbytes() == gradient.nbytes() &&
         (channels_last ? HasChannelsLastStrides(gradient) : gradient.is_contiguous()) &&
         gradient.dtype() == leaf.dtype() && gradient.device() == leaf.device() && !impl.requires_grad &&
         impl.grad_fn == nullptr && impl.autocast_copy == nullptr;
}

// Runs the queued callbacks; a callback may queue more, which run too.
void RunCallbacks(std::vector<std::function<void()>>& callbacks) {
  for (size_t i = 0; i < callbacks.size(); ++i) {
    std::function<void()> callback = std::move(callbacks[i]);
    callback();
  }
  callbacks.clear();
}

}  // namespace

Node::Node() : sequence_nr(next_sequence_nr.fetch_add(1)) {}

AccumulateGrad::AccumulateGrad(std::weak_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
  sequence_nr = std::numeric_limits<uint64_t>::max();  // gradient sinks run as soon as ready
}

std::vector<Tensor> AccumulateGrad::Apply(const Tensor& grad_output) {
  std::shared_ptr<TensorImpl> leaf = leaf_.lock();
  if (leaf == nullptr || !grad_output.defined()) return {};
  DDP_CHECK(grad_output.shape() == leaf->shape)
      << "gradient of shape " << ShapeToString(grad_output.shape()) << " for leaf '" << leaf->name
      << "' of shape " << ShapeToString(leaf->shape);
  if (leaf->grad == nullptr) {
    // A channels-last leaf's gradient is channels-last too (Note [Channels-last activations]), as PyTorch
    // lays a gradient out like its parameter.
    const bool channels_last = HasChannelsLastStrides(Tensor(leaf)) && grad_output.device().is_cpu();
    if (CanTakeGradient(grad_output, Tensor(leaf), channels_last)) {
      leaf->grad = grad_output.shared_impl();
    } else {
      leaf->grad =
          (channels_last ? CloneChannelsLast(grad_output.Detach()) : Clone(grad_output)).shared_impl();
    }
  } else {
    AddInPlace(Tensor(leaf->grad), grad_output);
  }
  // Copy: a hook may register or remove hooks.
  auto hooks = leaf->post_accumulate_hooks;
  Tensor leaf_handle(leaf);
  for (auto& [id, hook] : hooks) hook(leaf_handle);
  return {};
}

void ZeroGradients(const std::vector<Tensor>& leaves, bool set_to_none) {
  for (const Tensor& leaf : leaves) {
    Tensor grad = leaf.grad();
    if (!grad.defined()) continue;
    if (set_to_none) {
      leaf.set_grad(Tensor());
    } else {
      FillInPlace(grad, 0.0f);
    }
  }
}

void RunBackward(const Tensor& root, const Tensor& gradient) {
  DDP_CHECK(root.requires_grad()) << "backward of a tensor that does not require grad";
  DDP_CHECK(backward_callbacks == nullptr) << "backward started from inside a backward pass";
  Tensor seed = gradient;
  if (!seed.defined()) {
    DDP_CHECK(root.numel() == 1) << "backward without a gradient needs a one-element tensor, got "
                                 << ShapeToString(root.shape());
    seed = OnesLike(root);
  }
  DDP_CHECK(seed.shape() == root.shape())
      << "seed gradient shape " << ShapeToString(seed.shape()) << " != " << ShapeToString(root.shape());
  std::shared_ptr<Node> root_node = GradientEdge(root).node;
  DDP_CHECK(root_node != nullptr) << "backward of a tensor with no graph";
  DDP_CHECK(!root_node->released)
      << "backward through a graph that was already freed by an earlier backward pass";

  NoGradGuard no_grad;
  std::vector<std::function<void()>> callbacks;
  backward_callbacks = &callbacks;
  std::unordered_map<Node*, int> dependencies = CountDependencies(root_node.get());
  std::unordered_map<Node*, Tensor> buffers;
  buffers[root_node.get()] = seed;
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, ReadyOrder> ready;
  ready.push(root_node);
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    Tensor grad = std::move(buffers[node.get()]);
    buffers.erase(node.get());
    std::vector<Tensor> input_grads;
    if (grad.defined()) input_grads = node->Apply(grad);
    input_grads.resize(node->next_edges.size());
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const std::shared_ptr<Node>& child = node->next_edges[i].node;
      if (child == nullptr) continue;
      AccumulateIntoBuffer(buffers[child.get()], input_grads[i]);
      if (--dependencies[child.get()] == 0) ready.push(child);
    }
    node->ReleaseSavedTensors();
    node->next_edges.clear();
    node->released = !dynamic_cast<AccumulateGrad*>(node.get());
  }
  RunCallbacks(callbacks);
  backward_callbacks = nullptr;
}

void QueueBackwardFinishedCallback(std::function<void()> callback) {
  DDP_CHECK(backward_callbacks != nullptr) << "QueueBackwardFinishedCallback called outside a backward pass";
  backward_callbacks->push_back(std::move(callback));
}

bool GradModeEnabled() { return grad_mode_enabled; }

NoGradGuard::NoGradGuard() : previous_(grad_mode_enabled) { grad_mode_enabled = false; }
NoGradGuard::~NoGradGuard() { grad_mode_enabled = previous_; }

bool AnyRequiresGrad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_mode_enabled) return false;
  for (const Tensor* input : inputs) {
    if (input != nullptr && input->defined() && input->requires_grad()) return true;
  }
  return false;
}

Edge GradientEdge(const Tensor& input) {
  if (!input.defined() || !input.requires_grad()) return Edge{};
  TensorImpl* impl = input.impl();
  if (impl->grad_fn != nullptr) return Edge{impl->grad_fn};
  std::shared_ptr<AccumulateGrad> accumulator = impl->accumulator.lock();
  if (accumulator == nullptr) {
    accumulator = std::make_shared<AccumulateGrad>(input.shared_impl());
    impl->accumulator = accumulator;
  }
  return Edge{accumulator};
}

void SetHistory(const Tensor& output, std::shared_ptr<Node> node,
                std::initializer_list<const Tensor*> inputs) {
  node->next_edges.clear();
  for (const Tensor* input : inputs) {
    node->next_edges.push_back(input == nullptr ? Edge{} : GradientEdge(*input));
  }
  output.impl()->requires_grad = true;
  output.impl()->grad_fn = std::move(node);
}

}  // namespace ddp
