#include "nn/tensor_list.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ddp {

TensorList::TensorList(std::initializer_list<Tensor> tensors)
    : tensors_(tensors), names_(tensors.size()) {}

TensorList::TensorList(std::vector<Tensor> tensors) : tensors_(std::move(tensors)), names_(tensors_.size()) {}

TensorList::TensorList(std::initializer_list<std::pair<std::string, Tensor>> named) {
  for (const auto& [name, tensor] : named) Add(name, tensor);
}

TensorList& TensorList::Add(Tensor tensor) {
  tensors_.push_back(std::move(tensor));
  names_.emplace_back();
  return *this;
}

TensorList& TensorList::Add(std::string name, Tensor tensor) {
  DDP_CHECK(!name.empty()) << "TensorList: a named entry needs a non-empty name (entries so far: " << ToString()
                           << ")";
  DDP_CHECK(!Has(name)) << "TensorList: two entries called \"" << name << "\" in " << ToString();
  tensors_.push_back(std::move(tensor));
  names_.push_back(std::move(name));
  return *this;
}

const Tensor& TensorList::operator[](size_t index) const {
  DDP_CHECK(index < tensors_.size()) << "TensorList: no entry " << index << " in " << ToString();
  return tensors_[index];
}

Tensor& TensorList::operator[](size_t index) {
  DDP_CHECK(index < tensors_.size()) << "TensorList: no entry " << index << " in " << ToString();
  return tensors_[index];
}

const std::string& TensorList::name(size_t index) const {
  DDP_CHECK(index < names_.size()) << "TensorList: no entry " << index << " in " << ToString();
  return names_[index];
}

bool TensorList::Has(absl::string_view name) const {
  return !name.empty() && std::find(names_.begin(), names_.end(), name) != names_.end();
}

const Tensor& TensorList::Get(absl::string_view name) const {
  const auto it = name.empty() ? names_.end() : std::find(names_.begin(), names_.end(), name);
  DDP_CHECK(it != names_.end()) << "TensorList: no entry called \"" << name << "\" in " << ToString();
  return tensors_[it - names_.begin()];
}

absl::StatusOr<std::vector<Tensor>> TensorList::Bind(const std::vector<std::string>& parameters) const {
  std::vector<Tensor> bound(parameters.size());
  std::vector<bool> given(parameters.size(), false);
  auto error = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("takes (", absl::StrJoin(parameters, ", "), "): ", what,
                                                   "; got ", ToString()));
  };
  size_t positional = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    size_t k = positional;
    if (names_[i].empty()) {
      if (k >= parameters.size()) {
        return error(absl::StrCat(positional + 1, " positional inputs for ", parameters.size(), " parameters"));
      }
      ++positional;
    } else {
      k = std::find(parameters.begin(), parameters.end(), names_[i]) - parameters.begin();
      if (k == parameters.size()) return error(absl::StrCat("no parameter is called \"", names_[i], "\""));
    }
    if (given[k]) return error(absl::StrCat("\"", parameters[k], "\" is given by position and by name"));
    bound[k] = tensors_[i];
    given[k] = true;
  }
  for (size_t k = 0; k < parameters.size(); ++k) {
    if (!given[k]) return error(absl::StrCat("\"", parameters[k], "\" is missing"));
  }
  return bound;
}

std::string TensorList::ToString() const {
  std::vector<std::string> entries;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    const std::string what =
        t.defined() ? absl::StrCat(ShapeToString(t.shape()), " ", DTypeName(t.dtype())) : "undefined";
    entries.push_back(names_[i].empty() ? what : absl::StrCat(names_[i], ": ", what));
  }
  return absl::StrCat("(", absl::StrJoin(entries, ", "), ")");
}

}  // namespace ddp
