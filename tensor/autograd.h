// The autograd engine: graph nodes, the backward pass, grad mode, and the two extension points the
// Reducer builds on.
//
// Note [Backward firing order]
// Backward(root) runs synchronously on the calling thread. It first counts, for every node reachable
// from root, how many gradients it will receive; a node runs once all of them have arrived (summed).
// Among ready nodes, gradient sinks of leaves (AccumulateGrad) run first, then the most recently
// created node (highest sequence number), as PyTorch's CPU engine does. So a leaf's gradient is
// accumulated as soon as it is final, while the rest of the graph is still being walked:
//   (1) post-accumulate-grad hooks of a leaf fire right after its gradient was accumulated, once per
//       backward pass, on the thread running backward, in the order the leaf's gradient became final
//       (for a feed-forward model: roughly reverse registration order);
//   (2) callbacks queued with QueueBackwardFinishedCallback during the pass run once, after the last
//       node ran and every hook fired, on the same thread, in the order they were queued. A callback
//       may queue another callback, which runs in the same pass.
// After the pass the graph is freed: every node releases its saved tensors and edges (no
// retain_graph), so calling Backward twice through the same graph is an error.
#ifndef DDP_TENSOR_AUTOGRAD_H_
#define DDP_TENSOR_AUTOGRAD_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace ddp {

// An edge to the node that receives the gradient of one input (null when that input needs none).
struct Edge {
  std::shared_ptr<Node> node;
};

// One step of the backward graph: maps the gradient of its single output to gradients of its inputs.
// Created by ops during forward; owned by the output tensor's grad_fn and by downstream edges.
class Node {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Returns one gradient per entry of next_edges (an undefined Tensor where an input gets none).
  // Runs with grad mode off.
  virtual std::vector<Tensor> Apply(const Tensor& grad_output) = 0;
  // Human-readable name, e.g. "MatmulBackward".
  virtual std::string name() const = 0;
  // Drops tensors saved for backward (called once the node has run, freeing the graph).
  virtual void ReleaseSavedTensors() {}

  std::vector<Edge> next_edges;
  uint64_t sequence_nr;  // creation order; later nodes run first among ready ones
  bool released = false;  // set once the node ran in a backward pass and freed its state
};

// The gradient sink of a leaf: accumulates into leaf.grad (in place when a gradient already exists,
// so bucket views set with set_grad stay views), then fires the leaf's post-accumulate-grad hooks. A
// leaf without a gradient takes the computed one: the tensor itself where the backward pass holds the only
// handle on it and its memory and it is laid out as the leaf (as PyTorch's AccumulateGrad steals it), else
// a copy.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::weak_ptr<TensorImpl> leaf);
  std::vector<Tensor> Apply(const Tensor& grad_output) override;
  std::string name() const override { return "AccumulateGrad"; }
  // The leaf this node accumulates into (null if it was destroyed).
  std::shared_ptr<TensorImpl> leaf() const { return leaf_.lock(); }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// Clears the gradients of `leaves`: with `set_to_none` drops them (a leaf then takes the next gradient it
// gets without a fill or a sum, AccumulateGrad), else zeroes the existing ones in place and keeps them
// (views into buckets stay views). Leaves without a gradient are left alone.
void ZeroGradients(const std::vector<Tensor>& leaves, bool set_to_none);

// Runs the backward pass from `root` with seed gradient `gradient` (Note [Backward firing order]).
// REQUIRES: root.requires_grad(); gradient undefined (root must have one element: seed 1) or shaped like
// root. Not reentrant: a hook must not start another backward pass on the same thread.
void RunBackward(const Tensor& root, const Tensor& gradient);

// Queues `callback` to run once when the backward pass running on this thread finishes (extension
// point 2). REQUIRES: called from inside a backward pass (a hook or node), else it aborts.
void QueueBackwardFinishedCallback(std::function<void()> callback);

// Whether ops record the graph on this thread (thread-local; on by default).
bool GradModeEnabled();

// RAII: disables graph recording on this thread for its lifetime (like torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// For op implementations: true when an op with these inputs must record a node.
bool AnyRequiresGrad(std::initializer_list<const Tensor*> inputs);

// For op implementations: the edge that carries a gradient to `input` (its grad_fn, a leaf's
// AccumulateGrad, or null when it needs no gradient).
Edge GradientEdge(const Tensor& input);

// For op implementations: makes `output` the result of `node`, with edges to `inputs`.
void SetHistory(const Tensor& output, std::shared_ptr<Node> node,
                std::initializer_list<const Tensor*> inputs);

}  // namespace ddp

#endif  // DDP_TENSOR_AUTOGRAD_H_
