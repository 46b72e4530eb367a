#include "nn/optimizer.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

namespace ddp {

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  for (size_t i = 0; i < params_.size(); ++i) {
    DDP_CHECK(params_[i].defined()) << "optimizer parameter " << i << " is undefined";
    DDP_CHECK(params_[i].requires_grad())
        << "optimizer parameter " << i << " (" << params_[i].name() << ") does not require grad";
  }
}

void Optimizer::ZeroGrad(bool set_to_none) const { ZeroGradients(params_, set_to_none); }

Tensor Optimizer::CheckedGrad(size_t index) const {
  const Tensor& p = params_[index];
  const Tensor grad = p.grad();
  DDP_CHECK(p.device().is_cpu() && grad.device().is_cpu())
      << "optimizer: parameter " << index << " (" << p.name() << ") is on " << p.device().ToString()
      << "; this optimizer updates CPU tensors only";
  DDP_CHECK(p.dtype() == DType::kFloat32 && grad.dtype() == DType::kFloat32)
      << "optimizer: parameter " << index << " (" << p.name() << ") must be float32";
  DDP_CHECK(p.is_contiguous()) << "optimizer: parameter " << index << " (" << p.name()
                               << ") must be contiguous";
  DDP_CHECK(grad.shape() == p.shape()) << "optimizer: gradient " << ShapeToString(grad.shape())
                                       << " of parameter " << index << " (" << p.name() << ") "
                                       << ShapeToString(p.shape());
  return grad.is_contiguous() ? grad : Contiguous(grad.Detach());
}

absl::Status Optimizer::ParseStateKey(const std::string& key, size_t* index, std::string* field) const {
  const size_t dot = key.find('.');
  uint64_t parsed = 0;
  if (dot == std::string::npos || !absl::SimpleAtoi(key.substr(0, dot), &parsed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer state: key \"", key, "\" is not \"<parameter index>.<field>\""));
  }
  if (parsed >= params_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer state: key \"", key, "\" refers to parameter ",
                                                   parsed, " but the optimizer has ", params_.size()));
  }
  *index = static_cast<size_t>(parsed);
  *field = key.substr(dot + 1);
  return absl::OkStatus();
}

}  // namespace ddp
