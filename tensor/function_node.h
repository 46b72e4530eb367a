// For op implementations: a backward node defined by a lambda, and the helper that records it.
#ifndef DDP_TENSOR_FUNCTION_NODE_H_
#define DDP_TENSOR_FUNCTION_NODE_H_

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/autograd.h"

namespace ddp {

// A node whose backward is `fn`. Tensors the lambda captures are its saved tensors; they are freed
// (with the lambda) after the node ran. A lambda must never capture the op's output itself (that would
// be a reference cycle through grad_fn); capture output.Detach() instead.
class FunctionNode : public Node {
 public:
  using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;
  FunctionNode(const char* name, BackwardFn fn) : name_(name), fn_(std::move(fn)) {}
  std::vector<Tensor> Apply(const Tensor& grad_output) override { return fn_(grad_output); }
  std::string name() const override { return name_; }
  void ReleaseSavedTensors() override { fn_ = nullptr; }

 private:
  const char* name_;
  BackwardFn fn_;
};

// Records `fn` as the backward of `output` with edges to `inputs` when any input requires grad (and grad
// mode is on). `fn` returns one gradient per input, in order. Returns `output`.
inline Tensor RecordOp(Tensor output, const char* name, std::initializer_list<const Tensor*> inputs,
                       FunctionNode::BackwardFn fn) {
  if (AnyRequiresGrad(inputs)) SetHistory(output, std::make_shared<FunctionNode>(name, std::move(fn)), inputs);
  return output;
}

}  // namespace ddp

#endif  // DDP_TENSOR_FUNCTION_NODE_H_
