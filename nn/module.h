// Module: the base class of layers and models, like torch.nn.Module. START HERE for nn/: layers are in
// nn/layers.h, the example models in nn/models.h, optimizers in nn/optimizer.h (SGD: nn/sgd.h, Adam and
// AdamW: nn/adam.h), checkpoints in nn/safetensors.h.
//
// A module owns named parameters (leaf tensors that require grad), named buffers (state that is saved
// but not trained, e.g. BatchNorm's running statistics) and named child modules, each kept in
// registration order. Names seen from outside are PyTorch's dotted names ("fc1.weight",
// "bn1.running_mean"), so state dicts move between this engine and PyTorch through safetensors files.
//
// Example (compiled as ModuleTest.HeaderExample in nn/module_test.cc):
//
//   class TwoLayerNet : public Module {
//    public:
//     explicit TwoLayerNet(Generator& g) : Module("TwoLayerNet") {
//       RegisterModule("fc1", std::make_shared<nn::Linear>(4, 8, g));
//       RegisterModule("fc2", std::make_shared<nn::Linear>(8, 2, g));
//     }
//     Tensor Forward(const Tensor& x) override {
//       return Child("fc2")->Forward(Relu(Child("fc1")->Forward(x)));
//     }
//     std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }
//   };
//   // NamedParameters(): fc1.weight [8, 4], fc1.bias [8], fc2.weight [2, 8], fc2.bias [2].
//
// A module with several inputs or outputs overrides ForwardMany instead of Forward (Note [Modules with
// several inputs and outputs]).
//
// Ownership: children are held by shared_ptr (a child may be reached from several places, as in
// PyTorch); parameters and buffers are Tensor handles (shared data). Thread safety: none; one thread
// uses a module at a time (DataParallel gives each thread its own Replicate()).
//
// Note [Modules with several inputs and outputs]
// PyTorch's forward(*inputs, **kwargs) takes any arguments and returns any structure of tensors. Here a
// module has two entry points, and overrides at least one of them:
//   * Forward(const Tensor&) -> Tensor, the common case: every layer and built-in model overrides it.
//   * ForwardMany(const TensorList&) -> TensorList (nn/tensor_list.h), for several inputs (positional or
//     named, PyTorch's *inputs and tensor **kwargs) and several outputs (a tuple or dict: logits and an
//     auxiliary output). Example (compiled as ModuleTest.ForwardManyHeaderExample):
//
//       class TwoTower : public Module {  // children image, side, head, aux registered in the constructor
//        public:
//         TensorList ForwardMany(const TensorList& inputs) override {
//           const std::vector<Tensor> in = BindInputs(inputs, {"image", "side"});
//           Tensor h = Relu((*Child("image"))(in[0]) + (*Child("side"))(in[1]));
//           return {{"logits", (*Child("head"))(h)}, {"aux", (*Child("aux"))(h)}};
//         }
//       };
//       TensorList out = net.ForwardMany({x, s});  // or {{"image", x}, {"side", s}}
//       Tensor loss = CrossEntropy(out.Get("logits"), y) + CrossEntropy(out.Get("aux"), z) * 0.3f;
//
// Each default adapts the other: ForwardMany of a one-tensor module is {Forward(inputs[0])} (exactly one
// input), and Forward of a many-tensor module is ForwardMany({x}) (exactly one output), so every module
// can be called both ways: a wrapper (DistributedDataParallel) offers both and passes each call through
// to the same entry point of the module it wraps. An optional output that a call did not compute is an
// undefined entry (PyTorch's None). Settings that are not tensors (PyTorch's non-tensor kwargs) are
// members of the module, set before the call. With find_unused_parameters,
// DistributedDataParallel::ForwardMany searches every defined output's autograd graph for unused
// parameters, as PyTorch's DDP searches the structure forward returned.
#ifndef DDP_NN_MODULE_H_
#define DDP_NN_MODULE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "nn/tensor_list.h"
#include "tensor/tensor.h"

namespace ddp {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module;

// Note [Module call observer]
// A hook point for tools that follow module calls (the per-module trace slices of ddp/module_trace.h),
// like PyTorch's global forward pre- and post-hooks. Module::operator() tells the observer set on the
// calling thread before and after the call, and uses what it returns as the input and the output, so an
// observer may put an identity node of its own into the autograd graph (to see when the gradient reaches
// the module in backward). Without an observer operator() costs one thread-local load.
class ModuleCallObserver {
 public:
  virtual ~ModuleCallObserver() = default;
  // Before module.Forward: returns the tensor Forward gets (`input` itself, or an alias of it).
  virtual Tensor BeforeForward(const Module& module, const Tensor& input) = 0;
  // After module.Forward: returns the tensor the caller gets (`output` itself, or an alias of it).
  virtual Tensor AfterForward(const Module& module, const Tensor& output) = 0;
  // Before module.ForwardMany (Module::operator()(const TensorList&)): returns the inputs ForwardMany
  // gets, entry for entry (each the input itself or an alias of it). Default: BeforeForward on the first
  // defined input (on an undefined Tensor when there is none; its result then unused), the other entries
  // unchanged, so an observer written for one-tensor calls sees one call per module call.
  virtual TensorList BeforeForwardMany(const Module& module, const TensorList& inputs);
  // After module.ForwardMany: returns the outputs the caller gets. Default: AfterForward on the first
  // defined output, as BeforeForwardMany.
  virtual TensorList AfterForwardMany(const Module& module, const TensorList& outputs);
};

// Sets the calling thread's module call observer (null: none) and returns the previous one. Not owned:
// it must stay alive while set.
ModuleCallObserver* SetModuleCallObserver(ModuleCallObserver* observer);
class Module {
 public:
  virtual ~Module() = default;
  Module& operator=(const Module&) = delete;

  // The computation of a module with one input and one output. REQUIRES: x has the shape the layer
  // documents (checked by the ops). Every layer overrides it. Default, for a module that overrides
  // ForwardMany instead: ForwardMany({x}), which must return exactly one entry (aborts naming the module
  // and its outputs otherwise). Note [Modules with several inputs and outputs].
  virtual Tensor Forward(const Tensor& x);
  // The computation of a module with several inputs or outputs (Note [Modules with several inputs and
  // outputs]): the inputs positional or named, the outputs in the module's documented order and names.
  // Default, for a module that overrides Forward: {Forward(inputs[0])}. REQUIRES then: exactly one input
  // (aborts naming the module and what it got). A module that overrides neither aborts when called.
  virtual TensorList ForwardMany(const TensorList& inputs);
  // Forward(x), seen by this thread's ModuleCallObserver when one is set (Note [Module call observer]):
  // containers call their children this way (Sequential does), as PyTorch's __call__ runs the forward
  // hooks and a direct .forward() call does not.
  Tensor operator()(const Tensor& x);
  // ForwardMany(inputs), seen by the observer the same way (BeforeForwardMany, AfterForwardMany).
  TensorList operator()(const TensorList& inputs);
  // forward(x) in place of Forward(x), seen by the observer as this module's call: how a container runs
  // several children as one op (Note [Fusion in Sequential]) and the observer sees the first of them.
  Tensor CallAs(const Tensor& x, const std::function<Tensor(const Tensor&)>& forward);

  // A deep copy: same structure, configuration and values, but new storages for every parameter and
  // buffer (parameters are fresh leaves without gradients; hooks are not copied). Used by DataParallel
  // to build per-device replicas. Every concrete module implements it (usually with ReplicateAs).
  virtual std::shared_ptr<Module> Replicate() const = 0;

  // The class name, as PyTorch prints it ("Linear", "Conv2d", "Sequential").
  const std::string& type_name() const { return type_name_; }
  // A multi-line description like print(module) in PyTorch.
  std::string ToString() const;

  // ---- traversal (all in registration order, recursively, with dotted names) ----
  // Parameters of this module and its descendants. A tensor registered under several names is listed
  // once, under the first (PyTorch's named_parameters()). Names empty tensors' name() lazily.
  NamedTensors NamedParameters() const;
  std::vector<Tensor> Parameters() const;
  // Buffers of this module and its descendants (e.g. "bn1.running_mean", "bn1.num_batches_tracked").
  NamedTensors NamedBuffers() const;
  std::vector<Tensor> Buffers() const;
  // Direct children only.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& NamedChildren() const {
    return children_;
  }
  std::vector<std::shared_ptr<Module>> Children() const;
  // The direct child called `name`, or null.
  std::shared_ptr<Module> Child(const std::string& name) const;
  // Child(name) as an M (null when absent or of another type).
  template <typename M>
  std::shared_ptr<M> ChildAs(const std::string& name) const {
    return std::dynamic_pointer_cast<M>(Child(name));
  }
  // Replaces the direct child called `name` by `module`, keeping its position (used to swap layers, e.g.
  // ConvertSyncBatchNorm). REQUIRES: such a child exists and `module` is non-null.
  void ReplaceChild(const std::string& name, std::shared_ptr<Module> module);
  // This module's own parameter / buffer called `name` (not a descendant's), or an undefined Tensor.
  Tensor GetParameter(const std::string& name) const;
  Tensor GetBuffer(const std::string& name) const;

  // Sets every parameter's and buffer's name() to its full dotted name as seen from this module. Call
  // on the top-level module (MakeModel does); error messages and traces then say "fc1.weight".
  void AssignTensorNames() const;

  // ---- modes ----
  // Sets training mode on this module and all descendants (torch's train(mode)).
  void Train(bool training = true);
  // Train(false).
  void Eval() { Train(false); }
  bool is_training() const { return training_; }

  // Zeroes every existing parameter gradient in place and keeps it (PyTorch 1.13's
  // zero_grad(set_to_none=False)): gradients may be views into communication buckets, so they are
  // never replaced or dropped. Parameters without a gradient are left alone. With `set_to_none`
  // (PyTorch 2.x's default zero_grad()) the gradients are dropped instead: the next backward pass then
  // hands each parameter the gradient it computed, without a fill, a copy or a sum (tensor/autograd.h),
  // and a parameter that gets none keeps none, which optimizers skip (weight decay and momentum included,
  // as PyTorch's). Not for gradients that are views into buckets (gradient_as_bucket_view): those would
  // be copied back into their buckets every step.
  void ZeroGrad(bool set_to_none = false) const;

  // ---- state ----
  // Parameters then buffers of each module, module by module in registration order (the order of
  // torch's state_dict()). Tensors share data with the module (no copy).
  NamedTensors StateDict() const;
  // Copies values from `state` into this module's parameters and buffers in place (CopyInPlace), so
  // every Tensor handle, view and hook stays valid. Validates everything before copying anything: on
  // error nothing changed and the message names each missing key, unexpected key (only when strict)
  // and tensor whose shape or dtype differs from the module's. Thread safety: none.
  absl::Status LoadStateDict(const std::map<std::string, Tensor>& state, bool strict = true);
  absl::Status LoadStateDict(const NamedTensors& state, bool strict = true);

 protected:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  // Shallow member-wise copy (tensor handles and children shared); Replicate() deepens it.
  Module(const Module&) = default;

  // Registers a parameter (marks it requires_grad) in definition order and returns it.
  // REQUIRES: `name` is non-empty, has no '.', and is not yet used in this module.
  Tensor RegisterParameter(const std::string& name, Tensor tensor);
  // Registers a buffer. Same requirements.
  Tensor RegisterBuffer(const std::string& name, Tensor tensor);
  // Registers a child module and returns it. Same requirements; REQUIRES: module is non-null.
  template <typename M>
  std::shared_ptr<M> RegisterModule(const std::string& name, std::shared_ptr<M> module) {
    RegisterChild(name, module);
    return module;
  }

  // For ForwardMany: `inputs` bound to parameters called `parameters` as Python binds a call's arguments
  // (TensorList::Bind), one tensor per parameter in their order. Aborts with "<type>.ForwardMany takes
  // (...): ..." naming the missing, extra or doubly given input.
  std::vector<Tensor> BindInputs(const TensorList& inputs, const std::vector<std::string>& parameters) const;

  // One line of ToString() for this module alone, e.g. "Linear(in_features=784, out_features=512,
  // bias=True)". Defaults to "TypeName()".
  virtual std::string Describe() const;

  // The usual Replicate(): copy-constructs a T (configuration, shallow state), then replaces every
  // parameter and buffer with a deep copy and every child with child->Replicate().
  // REQUIRES: T reaches its tensors and children through GetParameter/GetBuffer/Child/ChildAs (as the
  // layers here do), not through Tensor or shared_ptr members of its own, which would still point at
  // the original's; a module with such members overrides Replicate() itself.
  template <typename T>
  static std::shared_ptr<Module> ReplicateAs(const T& self) {
    auto copy = std::shared_ptr<T>(new T(self));
    copy->DeepenCopy();
    return copy;
  }

 private:
  void RegisterChild(const std::string& name, std::shared_ptr<Module> module);
  void CheckNewName(const std::string& name) const;
  void DeepenCopy();
  void CollectParameters(const std::string& prefix, NamedTensors* out) const;
  void CollectBuffers(const std::string& prefix, NamedTensors* out) const;
  void CollectState(const std::string& prefix, NamedTensors* out) const;
  void AppendToString(const std::string& indent, std::string* out) const;

  std::string type_name_;
  bool training_ = true;
  // The default Forward is running ForwardMany: the default ForwardMany then aborts, since the module
  // overrides neither (Note [Modules with several inputs and outputs]).
  bool forward_adapts_many_ = false;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace ddp

#endif  // DDP_NN_MODULE_H_
