#include "nn/adam.h"

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "tensor/factory.h"
#include "tensor/functors.h"
#include "tensor/ops.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_ops.h"
#endif

namespace ddp {

AdamOptions AdamWDefaultOptions() {
  AdamOptions options;
  options.weight_decay = 1e-2f;
  return options;
}

absl::Status ValidateAdamOptions(const AdamOptions& o) {
  if (!(o.lr >= 0.0f)) return absl::InvalidArgumentError(absl::StrCat("Adam: invalid lr ", o.lr));
  if (!(o.eps >= 0.0f)) return absl::InvalidArgumentError(absl::StrCat("Adam: invalid eps ", o.eps));
  if (!(o.beta1 >= 0.0f && o.beta1 < 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("Adam: invalid beta1 ", o.beta1));
  }
  if (!(o.beta2 >= 0.0f && o.beta2 < 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("Adam: invalid beta2 ", o.beta2));
  }
  if (!(o.weight_decay >= 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("Adam: invalid weight_decay ", o.weight_decay));
  }
  return absl::OkStatus();
}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled_weight_decay)
    : Optimizer(std::move(params)),
      options_(options),
      decoupled_(decoupled_weight_decay),
      state_(params_.size()) {
  const absl::Status valid = ValidateAdamOptions(options);
  DDP_CHECK(valid.ok()) << valid.message();
}

void Adam::Step() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].grad().defined()) continue;
    const Tensor grad = CheckedGrad(i);
    ParamState& s = state_[i];
    if (s.step == 0) {
      s.exp_avg = Zeros(params_[i].shape(), DType::kFloat32, params_[i].device());
      s.exp_avg_sq = Zeros(params_[i].shape(), DType::kFloat32, params_[i].device());
    }
    ++s.step;
    // torch computes the bias corrections in double (Python floats).
    const double t = static_cast<double>(s.step);
    const functors::AdamStep step{options_.lr,
                                  options_.beta1,
                                  options_.beta2,
                                  options_.eps,
                                  options_.weight_decay,
                                  static_cast<float>(1.0 - std::pow(static_cast<double>(options_.beta1), t)),
                                  static_cast<float>(1.0 - std::pow(static_cast<double>(options_.beta2), t)),
                                  decoupled_};
#ifdef DDP_WITH_CUDA
    if (params_[i].device().is_cuda()) {
      cuda::AdamStep(params_[i], s.exp_avg, s.exp_avg_sq, grad, step);
      continue;
    }
#endif
    float* p = params_[i].data<float>();
    float* m = s.exp_avg.data<float>();
    float* v = s.exp_avg_sq.data<float>();
    const float* g = grad.data<float>();
    const int64_t n = params_[i].numel();
    for (int64_t e = 0; e < n; ++e) step(p[e], m[e], v[e], g[e]);
  }
  ++step_count_;
}

OptimizerState Adam::StateDict() const {
  OptimizerState out;
  out.step_count = step_count_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamState& s = state_[i];
    if (s.step == 0) continue;
    out.tensors.emplace_back(absl::StrCat(i, ".step"), FromVector(std::vector<int64_t>{s.step}, {}));
    out.tensors.emplace_back(absl::StrCat(i, ".exp_avg"), Clone(s.exp_avg));
    out.tensors.emplace_back(absl::StrCat(i, ".exp_avg_sq"), Clone(s.exp_avg_sq));
  }
  return out;
}

absl::Status Adam::LoadStateDict(const OptimizerState& state) {
  std::vector<ParamState> loaded(params_.size());
  std::map<size_t, int> fields_seen;  // bit 0: step, 1: exp_avg, 2: exp_avg_sq
  for (const auto& [key, tensor] : state.tensors) {
    size_t index = 0;
    std::string field;
    DDP_RETURN_IF_ERROR(ParseStateKey(key, &index, &field));
    const Tensor& param = params_[index];
    if (field == "step") {
      if (tensor.numel() != 1 || !(tensor.dtype() == DType::kInt64 || tensor.dtype() == DType::kFloat32)) {
        return absl::InvalidArgumentError(absl::StrCat("Adam state: \"", key, "\" must be a scalar"));
      }
      loaded[index].step = static_cast<int64_t>(tensor.item());
      if (loaded[index].step <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("Adam state: \"", key, "\" must be positive"));
      }
      fields_seen[index] |= 1;
      continue;
    }
    if (field != "exp_avg" && field != "exp_avg_sq") {
      return absl::InvalidArgumentError(absl::StrCat("Adam state: unknown key \"", key, "\""));
    }
    if (tensor.shape() != param.shape() || tensor.dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Adam state: \"", key, "\" is ", DTypeName(tensor.dtype()), " ", ShapeToString(tensor.shape()),
          " but parameter ", index, " (", param.name(), ") is float32 ", ShapeToString(param.shape())));
    }
    Tensor copy = Tensor::Empty(tensor.shape(), DType::kFloat32, param.device());
    CopyInPlace(copy, tensor);
    if (field == "exp_avg") {
      loaded[index].exp_avg = copy;
      fields_seen[index] |= 2;
    } else {
      loaded[index].exp_avg_sq = copy;
      fields_seen[index] |= 4;
    }
  }
  for (const auto& [index, seen] : fields_seen) {
    if (seen != 7) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Adam state: parameter ", index, " needs all of step, exp_avg and exp_avg_sq"));
    }
  }
  state_ = std::move(loaded);
  step_count_ = state.step_count;
  return absl::OkStatus();
}

}  // namespace ddp
