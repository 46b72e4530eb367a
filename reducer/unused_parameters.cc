#include "reducer/unused_parameters.h"

#include <unordered_map>
#include <unordered_set>

#include "tensor/autograd.h"

namespace ddp {

std::vector<bool> FindUsedParameters(const std::vector<Tensor>& outputs, const std::vector<Tensor>& params) {
  std::unordered_set<Node*> seen;
  std::unordered_set<TensorImpl*> reached;
  std::vector<Node*> stack;
  for (const Tensor& out : outputs) {
    if (!out.defined() || !out.requires_grad()) continue;
    if (out.grad_fn() != nullptr) {
      stack.push_back(out.grad_fn().get());
    } else {
      reached.insert(out.impl());  // an output that is itself a parameter
    }
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (auto* sink = dynamic_cast<AccumulateGrad*>(node)) {
      if (auto leaf = sink->leaf()) reached.insert(leaf.get());
      continue;
    }
    for (const Edge& edge : node->next_edges) {
      if (edge.node != nullptr) stack.push_back(edge.node.get());
    }
  }
  std::vector<bool> used(params.size());
  for (size_t i = 0; i < params.size(); ++i) used[i] = reached.count(params[i].impl()) > 0;
  return used;
}

}  // namespace ddp
