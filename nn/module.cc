#include "nn/module.h"

#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

std::string Join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// A deep copy of `t` with new storage and no autograd history; keeps requires_grad and name.
Tensor DeepCopy(const Tensor& t) {
  NoGradGuard no_grad;
  Tensor copy = Clone(t.Detach());
  if (copy.is_same(t) || copy.storage().get() == t.storage().get()) {
    copy = Tensor::Empty(t.shape(), t.dtype(), t.device());
    CopyInPlace(copy, t);
  }
  if (t.requires_grad()) copy.set_requires_grad(true);
  copy.set_name(t.name());
  return copy;
}

thread_local ModuleCallObserver* module_call_observer = nullptr;

}  // namespace

ModuleCallObserver* SetModuleCallObserver(ModuleCallObserver* observer) {
  ModuleCallObserver* previous = module_call_observer;
  module_call_observer = observer;
  return previous;
}

namespace {

// The index of the first defined entry of `list`, or list.size().
size_t FirstDefined(const TensorList& list) {
  size_t i = 0;
  while (i < list.size() && !list[i].defined()) ++i;
  return i;
}

}  // namespace

TensorList ModuleCallObserver::BeforeForwardMany(const Module& module, const TensorList& inputs) {
  const size_t first = FirstDefined(inputs);
  if (first == inputs.size()) {
    BeforeForward(module, Tensor());
    return inputs;
  }
  TensorList seen = inputs;
  seen[first] = BeforeForward(module, inputs[first]);
  return seen;
}

TensorList ModuleCallObserver::AfterForwardMany(const Module& module, const TensorList& outputs) {
  const size_t first = FirstDefined(outputs);
  if (first == outputs.size()) {
    AfterForward(module, Tensor());
    return outputs;
  }
  TensorList seen = outputs;
  seen[first] = AfterForward(module, outputs[first]);
  return seen;
}

// Note [Modules with several inputs and outputs]: each default adapts the other. The default Forward
// marks that it runs ForwardMany, so the default ForwardMany, reached only when the module overrides
// neither, stops with a message instead of recursing. A module whose ForwardMany calls its own Forward
// (recursion over its input) passes through the default Forward again, which sets the mark again, and
// never reaches the default ForwardMany: no false alarm.
Tensor Module::Forward(const Tensor& x) {
  const bool outer = forward_adapts_many_;
  forward_adapts_many_ = true;
  TensorList outputs = ForwardMany(TensorList{x});
  forward_adapts_many_ = outer;
  DDP_CHECK(outputs.size() == 1) << type_name_ << ".Forward: the module returns " << outputs.size()
                                 << " outputs " << outputs.ToString() << "; call ForwardMany to get them all";
  return outputs[0];
}

TensorList Module::ForwardMany(const TensorList& inputs) {
  DDP_CHECK(!forward_adapts_many_) << type_name_ << " overrides neither Forward nor ForwardMany";
  DDP_CHECK(inputs.size() == 1) << type_name_ << " takes one input (it overrides Forward, not ForwardMany), got "
                                << inputs.size() << ": " << inputs.ToString();
  return TensorList{Forward(inputs[0])};
}

std::vector<Tensor> Module::BindInputs(const TensorList& inputs, const std::vector<std::string>& parameters) const {
  absl::StatusOr<std::vector<Tensor>> bound = inputs.Bind(parameters);
  DDP_CHECK(bound.ok()) << type_name_ << ".ForwardMany " << bound.status().message();
  return *std::move(bound);
}

TensorList Module::operator()(const TensorList& inputs) {
  ModuleCallObserver* observer = module_call_observer;
  if (observer == nullptr) return ForwardMany(inputs);
  const TensorList outputs = ForwardMany(observer->BeforeForwardMany(*this, inputs));
  return observer->AfterForwardMany(*this, outputs);
}

Tensor Module::operator()(const Tensor& x) {
  ModuleCallObserver* observer = module_call_observer;
  if (observer == nullptr) return Forward(x);
  const Tensor output = Forward(observer->BeforeForward(*this, x));
  return observer->AfterForward(*this, output);
}

Tensor Module::CallAs(const Tensor& x, const std::function<Tensor(const Tensor&)>& forward) {
  ModuleCallObserver* observer = module_call_observer;
  if (observer == nullptr) return forward(x);
  const Tensor output = forward(observer->BeforeForward(*this, x));
  return observer->AfterForward(*this, output);
}

void Module::CheckNewName(const std::string& name) const {
  DDP_CHECK(!name.empty() && name.find('.') == std::string::npos)
      << type_name_ << ": invalid member name \"" << name << "\" (non-empty, no '.')";
  auto used = [&name](const auto& list) {
    for (const auto& entry : list) {
      if (entry.first == name) return true;
    }
    return false;
  };
  DDP_CHECK(!used(parameters_) && !used(buffers_) && !used(children_))
      << type_name_ << ": member \"" << name << "\" registered twice";
}

Tensor Module::RegisterParameter(const std::string& name, Tensor tensor) {
  CheckNewName(name);
  DDP_CHECK(tensor.defined()) << type_name_ << ": parameter \"" << name << "\" is undefined";
  DDP_CHECK(tensor.is_leaf()) << type_name_ << ": parameter \"" << name << "\" must be a leaf";
  tensor.set_requires_grad(true);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::RegisterBuffer(const std::string& name, Tensor tensor) {
  CheckNewName(name);
  DDP_CHECK(tensor.defined()) << type_name_ << ": buffer \"" << name << "\" is undefined";
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::RegisterChild(const std::string& name, std::shared_ptr<Module> module) {
  CheckNewName(name);
  DDP_CHECK(module != nullptr) << type_name_ << ": child \"" << name << "\" is null";
  children_.emplace_back(name, std::move(module));
}

void Module::ReplaceChild(const std::string& name, std::shared_ptr<Module> module) {
  DDP_CHECK(module != nullptr) << type_name_ << ": replacement for child \"" << name << "\" is null";
  for (auto& [child_name, child] : children_) {
    if (child_name == name) {
      child = std::move(module);
      return;
    }
  }
  DDP_CHECK(false) << type_name_ << " has no child \"" << name << "\" to replace";
}

void Module::CollectParameters(const std::string& prefix, NamedTensors* out) const {
  for (const auto& [name, tensor] : parameters_) out->emplace_back(Join(prefix, name), tensor);
  for (const auto& [name, child] : children_) child->CollectParameters(Join(prefix, name), out);
}

void Module::CollectBuffers(const std::string& prefix, NamedTensors* out) const {
  for (const auto& [name, tensor] : buffers_) out->emplace_back(Join(prefix, name), tensor);
  for (const auto& [name, child] : children_) child->CollectBuffers(Join(prefix, name), out);
}

void Module::CollectState(const std::string& prefix, NamedTensors* out) const {
  for (const auto& [name, tensor] : parameters_) out->emplace_back(Join(prefix, name), tensor);
  for (const auto& [name, tensor] : buffers_) out->emplace_back(Join(prefix, name), tensor);
  for (const auto& [name, child] : children_) child->CollectState(Join(prefix, name), out);
}

namespace {

// Drops repeated tensors (same impl), keeping the first name; names unnamed tensors.
NamedTensors Deduplicate(NamedTensors all) {
  NamedTensors out;
  std::set<const TensorImpl*> seen;
  for (auto& [name, tensor] : all) {
    if (!seen.insert(tensor.impl()).second) continue;
    if (tensor.name().empty()) tensor.set_name(name);
    out.emplace_back(std::move(name), std::move(tensor));
  }
  return out;
}

std::vector<Tensor> TensorsOf(const NamedTensors& named) {
  std::vector<Tensor> out;
  out.reserve(named.size());
  for (const auto& entry : named) out.push_back(entry.second);
  return out;
}

}  // namespace

NamedTensors Module::NamedParameters() const {
  NamedTensors all;
  CollectParameters("", &all);
  return Deduplicate(std::move(all));
}

std::vector<Tensor> Module::Parameters() const { return TensorsOf(NamedParameters()); }

NamedTensors Module::NamedBuffers() const {
  NamedTensors all;
  CollectBuffers("", &all);
  return Deduplicate(std::move(all));
}

std::vector<Tensor> Module::Buffers() const { return TensorsOf(NamedBuffers()); }

std::vector<std::shared_ptr<Module>> Module::Children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& entry : children_) out.push_back(entry.second);
  return out;
}

std::shared_ptr<Module> Module::Child(const std::string& name) const {
  for (const auto& entry : children_) {
    if (entry.first == name) return entry.second;
  }
  return nullptr;
}

Tensor Module::GetParameter(const std::string& name) const {
  for (const auto& entry : parameters_) {
    if (entry.first == name) return entry.second;
  }
  return Tensor();
}

Tensor Module::GetBuffer(const std::string& name) const {
  for (const auto& entry : buffers_) {
    if (entry.first == name) return entry.second;
  }
  return Tensor();
}

void Module::AssignTensorNames() const {
  NamedTensors all;
  CollectState("", &all);
  std::set<const TensorImpl*> seen;
  for (const auto& [name, tensor] : all) {
    if (seen.insert(tensor.impl()).second) tensor.set_name(name);
  }
}

void Module::Train(bool training) {
  training_ = training;
  for (const auto& entry : children_) entry.second->Train(training);
}

void Module::ZeroGrad(bool set_to_none) const { ZeroGradients(Parameters(), set_to_none); }

NamedTensors Module::StateDict() const {
  NamedTensors out;
  CollectState("", &out);
  return out;
}

absl::Status Module::LoadStateDict(const NamedTensors& state, bool strict) {
  std::map<std::string, Tensor> by_name;
  for (const auto& [name, tensor] : state) {
    if (!by_name.emplace(name, tensor).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("Error in loading state dict for ", type_name_, ": key \"", name,
                       "\" appears twice"));
    }
  }
  return LoadStateDict(by_name, strict);
}

absl::Status Module::LoadStateDict(const std::map<std::string, Tensor>& state, bool strict) {
  // Validate everything first, so a failed load leaves the module untouched.
  const NamedTensors own = StateDict();
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> own_names;
  for (const auto& [name, tensor] : own) {
    own_names.insert(name);
    auto it = state.find(name);
    if (it == state.end() || !it->second.defined()) {
      missing.push_back("\"" + name + "\"");
      continue;
    }
    const Tensor& src = it->second;
    if (src.shape() != tensor.shape() || src.dtype() != tensor.dtype()) {
      mismatched.push_back(absl::StrCat(
          "\"", name, "\": checkpoint has ", DTypeName(src.dtype()), " ", ShapeToString(src.shape()),
          ", the module has ", DTypeName(tensor.dtype()), " ", ShapeToString(tensor.shape())));
    }
  }
  for (const auto& entry : state) {
    if (own_names.count(entry.first) == 0) unexpected.push_back("\"" + entry.first + "\"");
  }
  std::vector<std::string> problems;
  if (strict && !missing.empty()) {
    problems.push_back("missing key(s): " + absl::StrJoin(missing, ", "));
  }
  if (strict && !unexpected.empty()) {
    problems.push_back("unexpected key(s): " + absl::StrJoin(unexpected, ", "));
  }
  if (!mismatched.empty()) problems.push_back("mismatch for " + absl::StrJoin(mismatched, "; "));
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("Error(s) in loading state dict for ", type_name_,
                                                   ": ", absl::StrJoin(problems, ". ")));
  }
  NoGradGuard no_grad;
  for (const auto& [name, tensor] : own) {
    auto it = state.find(name);
    if (it == state.end() || !it->second.defined()) continue;  // only when !strict
    if (it->second.is_same(tensor)) continue;
    CopyInPlace(tensor, it->second);
  }
  return absl::OkStatus();
}

void Module::DeepenCopy() {
  // Shared tensors stay shared inside the copy: map each original impl to its one copy.
  std::map<const TensorImpl*, Tensor> copies;
  auto copy_of = [&copies](const Tensor& t) {
    auto it = copies.find(t.impl());
    if (it != copies.end()) return it->second;
    Tensor c = DeepCopy(t);
    copies.emplace(t.impl(), c);
    return c;
  };
  for (auto& entry : parameters_) entry.second = copy_of(entry.second);
  for (auto& entry : buffers_) entry.second = copy_of(entry.second);
  for (auto& entry : children_) entry.second = entry.second->Replicate();
}

std::string Module::Describe() const { return type_name_ + "()"; }

void Module::AppendToString(const std::string& indent, std::string* out) const {
  if (children_.empty()) {
    *out += Describe();
    return;
  }
  *out += type_name_ + "(\n";
  for (const auto& [name, child] : children_) {
    *out += indent + "  (" + name + "): ";
    child->AppendToString(indent + "  ", out);
    *out += "\n";
  }
  *out += indent + ")";
}

std::string Module::ToString() const {
  std::string out;
  AppendToString("", &out);
  return out;
}

}  // namespace ddp
