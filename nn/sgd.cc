#include "nn/sgd.h"

#include "absl/strings/str_cat.h"
#include "tensor/factory.h"
#include "tensor/functors.h"
#include "tensor/ops.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_ops.h"
#endif

namespace ddp {

absl::Status ValidateSgdOptions(const SgdOptions& o) {
  if (!(o.lr >= 0.0f)) return absl::InvalidArgumentError(absl::StrCat("SGD: invalid lr ", o.lr));
  if (!(o.momentum >= 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("SGD: invalid momentum ", o.momentum));
  }
  if (!(o.weight_decay >= 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("SGD: invalid weight_decay ", o.weight_decay));
  }
  if (o.nesterov && (o.momentum <= 0.0f || o.dampening != 0.0f)) {
    return absl::InvalidArgumentError("SGD: nesterov momentum requires a momentum and zero dampening");
  }
  return absl::OkStatus();
}

Sgd::Sgd(std::vector<Tensor> params, const SgdOptions& options)
    : Optimizer(std::move(params)), options_(options), momentum_buffers_(params_.size()) {
  const absl::Status valid = ValidateSgdOptions(options);
  DDP_CHECK(valid.ok()) << valid.message();
}

void Sgd::Step() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].grad().defined()) continue;
    const Tensor grad = CheckedGrad(i);
    const bool use_momentum = options_.momentum != 0.0f;
    const bool first_step = use_momentum && !momentum_buffers_[i].defined();
    if (first_step) momentum_buffers_[i] = Zeros(params_[i].shape(), DType::kFloat32, params_[i].device());
    const functors::SgdStep step{options_.lr,       options_.momentum, options_.dampening,
                                 options_.weight_decay, options_.nesterov, first_step};
#ifdef DDP_WITH_CUDA
    if (params_[i].device().is_cuda()) {
      cuda::SgdStep(params_[i], use_momentum ? momentum_buffers_[i] : Tensor(), grad, step);
      continue;
    }
#endif
    float* p = params_[i].data<float>();
    const float* g = grad.data<float>();
    const int64_t n = params_[i].numel();
    if (use_momentum) {
      float* buf = momentum_buffers_[i].data<float>();
      for (int64_t e = 0; e < n; ++e) step(p[e], buf[e], g[e]);
    } else {
      float unused = 0.0f;
      for (int64_t e = 0; e < n; ++e) step(p[e], unused, g[e]);
    }
  }
  ++step_count_;
}

OptimizerState Sgd::StateDict() const {
  OptimizerState state;
  state.step_count = step_count_;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!momentum_buffers_[i].defined()) continue;
    state.tensors.emplace_back(absl::StrCat(i, ".momentum_buffer"), Clone(momentum_buffers_[i]));
  }
  return state;
}

absl::Status Sgd::LoadStateDict(const OptimizerState& state) {
  std::vector<Tensor> buffers(params_.size());
  for (const auto& [key, tensor] : state.tensors) {
    size_t index = 0;
    std::string field;
    DDP_RETURN_IF_ERROR(ParseStateKey(key, &index, &field));
    if (field != "momentum_buffer") {
      return absl::InvalidArgumentError(absl::StrCat("SGD state: unknown key \"", key, "\""));
    }
    if (tensor.shape() != params_[index].shape() || tensor.dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SGD state: \"", key, "\" is ", DTypeName(tensor.dtype()), " ", ShapeToString(tensor.shape()),
          " but parameter ", index, " (", params_[index].name(), ") is float32 ",
          ShapeToString(params_[index].shape())));
    }
    buffers[index] = Tensor::Empty(tensor.shape(), DType::kFloat32, params_[index].device());
    CopyInPlace(buffers[index], tensor);
  }
  momentum_buffers_ = std::move(buffers);
  step_count_ = state.step_count;
  return absl::OkStatus();
}

}  // namespace ddp
