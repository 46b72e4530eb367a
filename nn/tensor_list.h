// TensorList: the inputs or the outputs of a module call with several tensors (Module::ForwardMany), as
// PyTorch's forward(*inputs, **kwargs) takes them and returns a tuple or a dict. An ordered list of
// entries, each a Tensor with an optional name; entries are found by position or by name.
//
//   TensorList inputs{image, side};                        // positional: inputs[0], inputs[1]
//   TensorList outputs{{"logits", l}, {"aux", a}};         // named: outputs.Get("logits")
//   absl::StatusOr<std::vector<Tensor>> args = inputs.Bind({"image", "side"});  // Python's binding
//
// An entry may be an undefined Tensor: an optional output that a call did not compute (PyTorch's None).
// DistributedDataParallel searches the autograd graph of every defined output (find_unused_parameters).
// Thread safety: none; a value type whose copies share tensor data, as copies of a Tensor do.
#ifndef DDP_NN_TENSOR_LIST_H_
#define DDP_NN_TENSOR_LIST_H_

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensor/tensor.h"

namespace ddp {

class TensorList {
 public:
  // No entries.
  TensorList() = default;
  // Positional entries, in order: TensorList{x, s}.
  TensorList(std::initializer_list<Tensor> tensors);
  explicit TensorList(std::vector<Tensor> tensors);
  // Named entries, in order: TensorList{{"logits", l}, {"aux", a}}. REQUIRES: the names are non-empty and
  // distinct (aborts naming the repeated or empty one).
  TensorList(std::initializer_list<std::pair<std::string, Tensor>> named);

  // Appends a positional entry. Returns *this.
  TensorList& Add(Tensor tensor);
  // Appends an entry called `name`. REQUIRES: `name` is non-empty and not used yet (aborts naming it).
  TensorList& Add(std::string name, Tensor tensor);

  size_t size() const { return tensors_.size(); }
  bool empty() const { return tensors_.empty(); }
  // Entry `index`. REQUIRES: index < size() (aborts naming the index and the entries).
  const Tensor& operator[](size_t index) const;
  Tensor& operator[](size_t index);
  // The name of entry `index`, "" for a positional one. REQUIRES: index < size().
  const std::string& name(size_t index) const;
  // Whether an entry (defined or not) is called `name`.
  bool Has(absl::string_view name) const;
  // The entry called `name`. REQUIRES: Has(name) (aborts naming it and listing the entries).
  const Tensor& Get(absl::string_view name) const;
  // Every entry's tensor, in order, undefined ones included.
  const std::vector<Tensor>& tensors() const { return tensors_; }

  // Binds the entries to parameters called `parameters` the way Python binds a call's arguments to
  // forward(self, a, b): the k-th positional entry goes to parameters[k], a named entry to the parameter
  // of its name. Returns one tensor per parameter, in parameter order. Errors (kInvalidArgument) name a
  // missing parameter, an entry no parameter takes, or a parameter given both ways, with the entries.
  absl::StatusOr<std::vector<Tensor>> Bind(const std::vector<std::string>& parameters) const;

  // The entries for messages: "(logits: [4, 10] float32, aux: undefined)"; positional ones unnamed.
  std::string ToString() const;

 private:
  std::vector<Tensor> tensors_;
  std::vector<std::string> names_;  // parallel to tensors_; "" for a positional entry
};

}  // namespace ddp

#endif  // DDP_NN_TENSOR_LIST_H_
