// Contracts: nn/weights_file.h.
#include "nn/weights_file.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
#include "io/file.h"
#include "nn/safetensors.h"
#include "nn/torch_save.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

bool IsHalfPrecision(DType dtype) { return dtype == DType::kFloat16 || dtype == DType::kBFloat16; }

// The module's own tensors, in its order and by name, taken once per load.
struct OwnTensors {
  explicit OwnTensors(const Module& module) : ordered(module.StateDict()) {
    for (const auto& [name, tensor] : ordered) by_name.emplace(name, tensor);
  }
  NamedTensors ordered;
  std::map<std::string, Tensor> by_name;
};

// Widens the float16 / bfloat16 tensors that the module holds as float32 of the same shape; a note says
// how many.
void WidenToModuleDTypes(const OwnTensors& module, NamedTensors& tensors, std::vector<std::string>& notes) {
  const std::map<std::string, Tensor>& own = module.by_name;
  int widened = 0;
  for (auto& [name, tensor] : tensors) {
    const auto it = own.find(name);
    if (it == own.end() || !IsHalfPrecision(tensor.dtype()) || it->second.dtype() != DType::kFloat32 ||
        it->second.shape() != tensor.shape()) {
      continue;
    }
    tensor = ToDType(tensor, DType::kFloat32);
    ++widened;
  }
  if (widened > 0)
    notes.push_back(absl::StrCat("widened ", widened, " float16/bfloat16 tensor(s) to float32"));
}

// When none of the file's names is one of the module's, but every one of them starts with the same
// "<prefix>." and without it each is (a model saved as an attribute of a wrapper: Lightning's "model.",
// a "backbone."), removes the prefix; a note says which.
void StripPrefixTheModuleLacks(const OwnTensors& module, NamedTensors& tensors,
                               std::vector<std::string>& notes) {
  if (tensors.empty()) return;
  const std::map<std::string, Tensor>& own = module.by_name;
  const std::string& first = tensors[0].first;
  const size_t dot = first.find('.');
  if (dot == std::string::npos) return;
  const std::string prefix = first.substr(0, dot + 1);
  for (const auto& [name, tensor] : tensors) {
    if (own.count(name) != 0 || !absl::StartsWith(name, prefix) ||
        own.count(name.substr(prefix.size())) == 0) {
      return;
    }
  }
  for (auto& [name, tensor] : tensors) name.erase(0, prefix.size());
  notes.push_back(
      absl::StrCat("removed the prefix \"", prefix, "\" that every name has and the model's lack"));
}

bool StartsWithAny(const std::string& name, const std::vector<std::string>& prefixes) {
  for (const std::string& p : prefixes) {
    if (absl::StartsWith(name, p)) return true;
  }
  return false;
}

// Replaces the file's tensors under the `prefixes` by the module's own (which LoadStateDict then leaves as
// they are); a note says how many stayed.
absl::Status KeepInitial(const OwnTensors& module, const std::vector<std::string>& prefixes,
                         NamedTensors& tensors, std::vector<std::string>& notes) {
  if (prefixes.empty()) return absl::OkStatus();
  const NamedTensors& own = module.ordered;
  for (const std::string& p : prefixes) {
    if (std::none_of(own.begin(), own.end(),
                     [&](const auto& entry) { return absl::StartsWith(entry.first, p); })) {
      std::vector<std::string> tops;  // the model's top-level prefixes, in order
      for (const auto& entry : own) {
        const std::string top = entry.first.substr(0, entry.first.find('.') + 1);
        if (std::find(tops.begin(), tops.end(), top) == tops.end()) tops.push_back(top);
      }
      return absl::InvalidArgumentError(
          absl::StrCat("the prefix \"", p, "\" to keep initial names none of the ",
                       "model's tensors (its top-level names: ", absl::StrJoin(tops, ", "), ")"));
    }
  }
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                               [&](const auto& entry) { return StartsWithAny(entry.first, prefixes); }),
                tensors.end());
  int kept = 0;
  for (const auto& [name, tensor] : own) {
    if (!StartsWithAny(name, prefixes)) continue;
    tensors.emplace_back(name, tensor);
    ++kept;
  }
  notes.push_back(
      absl::StrCat("kept the initial values of ", kept, " tensor(s) under ", absl::StrJoin(prefixes, ", ")));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> LoadModuleWeights(Module& module, const std::string& path,
                                                           bool strict,
                                                           const std::vector<std::string>& keep_initial) {
  // Mapped, not read: the tensors are copied into the module before the mapping goes (MappedFile).
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MapFile(path));
  NamedTensors tensors;
  std::vector<std::string> notes;
  if (LooksLikeTorchSave(file->bytes())) {
    DDP_ASSIGN_OR_RETURN(TorchStateDict state, ParseTorchStateDict(file, file->bytes(), path));
    tensors = std::move(state.tensors);
    notes = std::move(state.notes);
  } else {
    DDP_ASSIGN_OR_RETURN(SafetensorsContents contents, ParseSafetensors(file->bytes(), path, file));
    tensors = std::move(contents.tensors);
  }
  const OwnTensors own(module);
  StripPrefixTheModuleLacks(own, tensors, notes);
  if (absl::Status kept = KeepInitial(own, keep_initial, tensors, notes); !kept.ok()) {
    return absl::Status(kept.code(), absl::StrCat("loading ", path, ": ", kept.message()));
  }
  WidenToModuleDTypes(own, tensors, notes);
  absl::Status status = module.LoadStateDict(tensors, strict);
  if (!status.ok())
    return absl::Status(status.code(), absl::StrCat("loading ", path, ": ", status.message()));
  return notes;
}

bool IsTorchSavePath(const std::string& path) {
  return absl::EndsWith(path, ".pt") || absl::EndsWith(path, ".pth");
}

absl::Status SaveModuleWeights(const Module& module, const std::string& path) {
  if (IsTorchSavePath(path)) return SaveTorchStateDict(path, module.StateDict());
  return SaveModuleToSafetensors(module, path);
}

}  // namespace ddp
