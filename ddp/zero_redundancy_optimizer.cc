#include "ddp/zero_redundancy_optimizer.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nn/clip_grad.h"
#include "base/check.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {

absl::StatusOr<ZeroInnerOptimizer> ParseZeroInnerOptimizer(const std::string& name) {
  if (name == "sgd") return ZeroInnerOptimizer::kSgd;
  if (name == "adam") return ZeroInnerOptimizer::kAdam;
  if (name == "adamw") return ZeroInnerOptimizer::kAdamW;
  return absl::InvalidArgumentError(
      absl::StrCat("ZeRO: unknown optimizer \"", name, "\" (valid: sgd, adam, adamw)"));
}

absl::StatusOr<std::vector<ZeroGroupLayout>> ComputeZeroLayout(const std::vector<int64_t>& param_numels,
                                                               const std::vector<std::vector<size_t>>& groups,
                                                               int world_size) {
  if (world_size < 1) return absl::InvalidArgumentError(absl::StrCat("ZeRO: world size ", world_size));
  std::vector<std::vector<size_t>> chosen = groups;
  if (chosen.empty()) {
    chosen.emplace_back();
    for (size_t i = 0; i < param_numels.size(); ++i) chosen[0].push_back(i);
  }
  std::vector<bool> seen(param_numels.size(), false);
  std::vector<ZeroGroupLayout> layout;
  for (const std::vector<size_t>& members : chosen) {
    ZeroGroupLayout group;
    for (size_t index : members) {
      if (index >= param_numels.size()) {
        return absl::InvalidArgumentError(absl::StrCat("ZeRO groups: parameter ", index, " out of range (",
                                                       param_numels.size(), " parameters)"));
      }
      if (seen[index]) return absl::InvalidArgumentError(absl::StrCat("ZeRO groups: parameter ", index, " twice"));
      seen[index] = true;
      group.params.push_back(index);
      group.numel += param_numels[index];
    }
    group.shard_numel = std::max<int64_t>(1, (group.numel + world_size - 1) / world_size);
    layout.push_back(std::move(group));
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    if (!seen[i]) return absl::InvalidArgumentError(absl::StrCat("ZeRO groups: parameter ", i, " is in no group"));
  }
  return layout;
}

std::vector<ZeroSegment> ZeroShardSegments(const ZeroGroupLayout& group, const std::vector<int64_t>& param_numels,
                                           int rank) {
  const int64_t begin = rank * group.shard_numel;
  const int64_t end = begin + group.shard_numel;
  std::vector<ZeroSegment> segments;
  int64_t offset = 0;  // of the current parameter inside the group's flat range
  for (size_t index : group.params) {
    const int64_t n = param_numels[index];
    const int64_t lo = std::max(begin, offset);
    const int64_t hi = std::min(end, offset + n);
    if (lo < hi) segments.push_back(ZeroSegment{index, lo - offset, lo - begin, hi - lo});
    offset += n;
  }
  return segments;
}

namespace {

std::vector<int64_t> Numels(const std::vector<Tensor>& params) {
  std::vector<int64_t> numels;
  for (const Tensor& p : params) numels.push_back(p.numel());
  return numels;
}

absl::Status ValidateOptions(const ZeroOptions& options) {
  if (options.optimizer == ZeroInnerOptimizer::kSgd) return ValidateSgdOptions(options.sgd);
  return ValidateAdamOptions(options.adam);
}

std::unique_ptr<Optimizer> MakeInner(const std::vector<Tensor>& shards, const ZeroOptions& options) {
  switch (options.optimizer) {
    case ZeroInnerOptimizer::kSgd:
      return std::make_unique<Sgd>(shards, options.sgd);
    case ZeroInnerOptimizer::kAdam:
      return std::make_unique<Adam>(shards, options.adam);
    case ZeroInnerOptimizer::kAdamW:
      return std::make_unique<AdamW>(shards, options.adam);
  }
  return nullptr;
}

// "<index>.<field>" split; REQUIRES a key written by an Optimizer.
std::pair<size_t, std::string> SplitKey(const std::string& key) {
  const size_t dot = key.find('.');
  DDP_CHECK(dot != std::string::npos) << "optimizer state key " << key;
  return {static_cast<size_t>(std::stoull(key.substr(0, dot))), key.substr(dot + 1)};
}

// Fields that are one scalar per parameter (the rest have the parameter's shape).
bool IsScalarField(const std::string& field) { return field == "step"; }

}  // namespace

absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> ZeroRedundancyOptimizer::Create(
    std::vector<Tensor> params, ProcessGroup* group, const ZeroOptions& options) {
  DDP_CHECK(group != nullptr) << "ZeroRedundancyOptimizer needs a process group";
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    DDP_CHECK(p.defined() && p.device().is_cpu() && p.dtype() == DType::kFloat32 && p.is_contiguous())
        << "ZeroRedundancyOptimizer: parameter " << i << " must be a contiguous float32 CPU tensor";
  }
  DDP_RETURN_IF_ERROR(ValidateOptions(options));
  DDP_ASSIGN_OR_RETURN(std::vector<ZeroGroupLayout> layout,
                       ComputeZeroLayout(Numels(params), options.groups, group->size()));
  return std::unique_ptr<ZeroRedundancyOptimizer>(
      new ZeroRedundancyOptimizer(std::move(params), group, std::move(layout), options));
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, ProcessGroup* group,
                                                 std::vector<ZeroGroupLayout> layout, const ZeroOptions& options)
    : Optimizer(std::move(params)), group_(group), options_(options), param_numels_(Numels(params_)) {
  InstallLayout(std::move(layout));
}

void ZeroRedundancyOptimizer::InstallLayout(std::vector<ZeroGroupLayout> layout) {
  if (inner_ != nullptr) options_.sgd.lr = options_.adam.lr = inner_->lr();  // keep a scheduled lr
  layout_ = std::move(layout);
  segments_.clear();
  shard_params_.clear();
  for (const ZeroGroupLayout& g : layout_) {
    segments_.push_back(ZeroShardSegments(g, param_numels_, group_->rank()));
    Tensor shard = Zeros({g.shard_numel});
    shard.set_requires_grad(true);
    shard.set_grad(Zeros({g.shard_numel}));
    shard_params_.push_back(shard);
  }
  inner_ = MakeInner(shard_params_, options_);
  shard_grads_loaded_ = false;
  if (hook_shared_ != nullptr) {
    std::lock_guard<std::mutex> lock(hook_shared_->mu);
    hook_shared_->layout = layout_;
  }
}

std::shared_ptr<ZeroHookShared> ZeroRedundancyOptimizer::hook_shared() {
  if (hook_shared_ == nullptr) {
    hook_shared_ = std::make_shared<ZeroHookShared>();
    std::lock_guard<std::mutex> lock(hook_shared_->mu);
    hook_shared_->layout = layout_;
  }
  return hook_shared_;
}

absl::Status ZeroRedundancyOptimizer::Reshard(const std::vector<std::vector<size_t>>& groups) {
  DDP_CHECK(!shard_grads_loaded_) << "ZeroRedundancyOptimizer::Reshard between ClipGradNorm and TryStep";
  DDP_ASSIGN_OR_RETURN(std::vector<ZeroGroupLayout> layout, ComputeZeroLayout(param_numels_, groups, group_->size()));
  bool same = layout.size() == layout_.size();
  for (size_t g = 0; same && g < layout.size(); ++g) same = layout[g].params == layout_[g].params;
  if (same) return absl::OkStatus();
  DDP_ASSIGN_OR_RETURN(const OptimizerState full, GatherState(-1));
  InstallLayout(std::move(layout));
  return LoadStateDict(full);
}

absl::Status ZeroRedundancyOptimizer::FollowHookBuckets() {
  if (hook_shared_ == nullptr) return absl::OkStatus();
  std::vector<std::vector<size_t>> buckets;
  {
    std::lock_guard<std::mutex> lock(hook_shared_->mu);
    const bool mismatched = hook_shared_->mismatched;
    buckets.swap(hook_shared_->observed);
    hook_shared_->mismatched = false;
    if (!mismatched) return absl::OkStatus();
  }
  absl::Status resharded = Reshard(buckets);
  if (!resharded.ok()) {
    return absl::Status(resharded.code(), absl::StrCat("ZeRO: following the rebuilt buckets: ", resharded.message()));
  }
  return absl::OkStatus();
}

absl::Status ZeroRedundancyOptimizer::LoadShardGradients() {
  if (shard_grads_loaded_) return absl::OkStatus();
  DDP_RETURN_IF_ERROR(FollowHookBuckets());
  for (size_t g = 0; g < layout_.size(); ++g) {
    for (size_t index : layout_[g].params) {
      if (!params_[index].grad().defined()) {
        return absl::FailedPreconditionError(absl::StrCat("ZeRO step: parameter ", index, " (",
                                                          params_[index].name(), ") has no gradient"));
      }
    }
    float* shard_grad = shard_params_[g].grad().data<float>();
    std::fill(shard_grad, shard_grad + layout_[g].shard_numel, 0.0f);  // padding stays zero
    for (const ZeroSegment& s : segments_[g]) {
      const Tensor grad = CheckedGrad(s.param);
      std::memcpy(shard_grad + s.shard_offset, grad.data<float>() + s.param_offset, s.length * sizeof(float));
    }
  }
  shard_grads_loaded_ = true;
  return absl::OkStatus();
}

absl::Status ZeroRedundancyOptimizer::GatherParameters(size_t g) {
  const ZeroGroupLayout& layout = layout_[g];
  std::vector<Tensor> pieces;
  for (int r = 0; r < group_->size(); ++r) pieces.push_back(Tensor::Empty({layout.shard_numel}));
  absl::Status gathered = group_->AllGather(pieces, shard_params_[g].Detach())->Wait(group_->timeout());
  if (!gathered.ok()) {
    return absl::Status(gathered.code(), absl::StrCat("ZeRO: all-gather of parameter group ", g, ": ",
                                                      gathered.message()));
  }
  for (int r = 0; r < group_->size(); ++r) {
    const float* piece = pieces[r].data<float>();
    for (const ZeroSegment& s : ZeroShardSegments(layout, param_numels_, r)) {
      std::memcpy(params_[s.param].data<float>() + s.param_offset, piece + s.shard_offset, s.length * sizeof(float));
    }
  }
  return absl::OkStatus();
}

void ZeroRedundancyOptimizer::Step() {
  const absl::Status status = TryStep();
  DDP_CHECK(status.ok()) << status.message();
}

absl::Status ZeroRedundancyOptimizer::TryStep() {
  DDP_RETURN_IF_ERROR(LoadShardGradients());
  // The shard parameters are refreshed from the parameters, which may have been changed from outside
  // (a loaded model, DDP's broadcast) since the last step.
  for (size_t g = 0; g < layout_.size(); ++g) {
    float* shard = shard_params_[g].data<float>();
    for (const ZeroSegment& s : segments_[g]) {
      std::memcpy(shard + s.shard_offset, params_[s.param].data<float>() + s.param_offset, s.length * sizeof(float));
    }
  }
  inner_->Step();
  shard_grads_loaded_ = false;
  consolidated_current_ = false;
  consolidated_.reset();
  ++step_count_;
  for (size_t g = 0; g < layout_.size(); ++g) DDP_RETURN_IF_ERROR(GatherParameters(g));
  return absl::OkStatus();
}

absl::StatusOr<double> ZeroRedundancyOptimizer::ClipGradNorm(double max_norm) {
  DDP_RETURN_IF_ERROR(LoadShardGradients());
  // Each rank's squared norm travels as the bytes of a double and is summed in rank order, so every
  // rank gets the same total (and the same scale) without float32 rounding of the exchange.
  const SquaredNormSum sum_over_ranks = [this](double local) -> absl::StatusOr<double> {
    std::string mine(sizeof(double), '\0');
    std::memcpy(mine.data(), &local, sizeof(double));
    std::vector<std::string> all;
    DDP_RETURN_IF_ERROR(group_->AllGatherObject(mine, &all));
    double total = 0.0;
    for (const std::string& bytes : all) {
      if (bytes.size() != sizeof(double)) return absl::InternalError("ZeRO clip: a rank sent a malformed norm");
      double value = 0.0;
      std::memcpy(&value, bytes.data(), sizeof(double));
      total += value;
    }
    return total;
  };
  return ddp::ClipGradNorm(shard_params_, max_norm, sum_over_ranks);
}

absl::Status ZeroRedundancyOptimizer::ConsolidateStateDict(int to) {
  DDP_CHECK(to >= 0 && to < group_->size()) << "ConsolidateStateDict: rank " << to;
  DDP_ASSIGN_OR_RETURN(OptimizerState state, GatherState(to));
  consolidated_current_ = true;
  consolidated_.reset();
  if (group_->rank() == to) consolidated_ = std::move(state);
  return absl::OkStatus();
}

absl::StatusOr<OptimizerState> ZeroRedundancyOptimizer::GatherState(int to) {
  const bool keep = to < 0 || group_->rank() == to;
  const OptimizerState shard_state = inner_->StateDict();
  std::map<size_t, std::vector<std::pair<std::string, Tensor>>> per_param;  // ordered by parameter index
  for (const auto& [key, tensor] : shard_state.tensors) {
    const auto [g, field] = SplitKey(key);
    const ZeroGroupLayout& layout = layout_[g];
    if (IsScalarField(field)) {
      for (size_t index : layout.params) per_param[index].emplace_back(field, Clone(tensor));
      continue;
    }
    DDP_CHECK(tensor.numel() == layout.shard_numel) << "ZeRO state " << key << " is not shard-shaped";
    std::vector<Tensor> pieces;
    for (int r = 0; r < group_->size(); ++r) pieces.push_back(Tensor::Empty({layout.shard_numel}));
    absl::Status gathered = group_->AllGather(pieces, tensor)->Wait(group_->timeout());
    if (!gathered.ok()) {
      return absl::Status(gathered.code(), absl::StrCat("ZeRO: consolidating \"", key, "\": ", gathered.message()));
    }
    if (!keep) continue;
    std::map<size_t, Tensor> full;
    for (size_t index : layout.params) full[index] = Tensor::Empty(params_[index].shape());
    for (int r = 0; r < group_->size(); ++r) {
      for (const ZeroSegment& s : ZeroShardSegments(layout, param_numels_, r)) {
        std::memcpy(full[s.param].data<float>() + s.param_offset, pieces[r].data<float>() + s.shard_offset,
                    s.length * sizeof(float));
      }
    }
    for (size_t index : layout.params) per_param[index].emplace_back(field, full[index]);
  }
  OptimizerState state;
  state.step_count = step_count_;
  if (!keep) return state;
  for (auto& [index, fields] : per_param) {
    for (auto& [field, tensor] : fields) state.tensors.emplace_back(absl::StrCat(index, ".", field), tensor);
  }
  return state;
}

OptimizerState ZeroRedundancyOptimizer::StateDict() const {
  if (step_count_ > 0) {
    DDP_CHECK(consolidated_current_) << "ZeroRedundancyOptimizer::StateDict needs ConsolidateStateDict after the "
                                        "last step (collective)";
  }
  OptimizerState out;
  out.step_count = step_count_;
  if (!consolidated_.has_value()) return out;
  for (const auto& [key, tensor] : consolidated_->tensors) out.tensors.emplace_back(key, Clone(tensor));
  return out;
}

absl::Status ZeroRedundancyOptimizer::LoadStateDict(const OptimizerState& state) {
  std::map<size_t, std::map<std::string, Tensor>> per_param;
  for (const auto& [key, tensor] : state.tensors) {
    size_t index = 0;
    std::string field;
    DDP_RETURN_IF_ERROR(ParseStateKey(key, &index, &field));
    const bool fits = IsScalarField(field) ? tensor.numel() == 1
                                           : tensor.shape() == params_[index].shape() &&
                                                 tensor.dtype() == DType::kFloat32;
    if (!fits) {
      return absl::InvalidArgumentError(absl::StrCat("ZeRO state: \"", key, "\" is ", DTypeName(tensor.dtype()), " ",
                                                     ShapeToString(tensor.shape()), ", which does not fit parameter ",
                                                     index, " ", ShapeToString(params_[index].shape())));
    }
    per_param[index][field] = HostContiguous(tensor);
  }
  OptimizerState shard_state;
  shard_state.step_count = state.step_count;
  for (size_t g = 0; g < layout_.size(); ++g) {
    const ZeroGroupLayout& layout = layout_[g];
    const auto first = per_param.find(layout.params.front());
    const std::map<std::string, Tensor> none;
    const std::map<std::string, Tensor>& fields = first == per_param.end() ? none : first->second;
    for (size_t index : layout.params) {
      const auto it = per_param.find(index);
      const size_t count = it == per_param.end() ? 0 : it->second.size();
      bool same = count == fields.size();
      for (const auto& [field, tensor] : fields) {
        same = same && it->second.count(field) == 1 &&
               (!IsScalarField(field) || it->second.at(field).item() == tensor.item());
      }
      if (!same) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ZeRO state: parameter ", index, " has different state fields or step than parameter ",
            layout.params.front(), " of the same shard group"));
      }
    }
    for (const auto& [field, tensor] : fields) {
      const std::string key = absl::StrCat(g, ".", field);
      if (IsScalarField(field)) {
        shard_state.tensors.emplace_back(key, Clone(tensor));
        continue;
      }
      Tensor shard = Zeros({layout.shard_numel});
      for (const ZeroSegment& s : segments_[g]) {
        std::memcpy(shard.data<float>() + s.shard_offset, per_param[s.param].at(field).data<float>() + s.param_offset,
                    s.length * sizeof(float));
      }
      shard_state.tensors.emplace_back(key, shard);
    }
  }
  DDP_RETURN_IF_ERROR(inner_->LoadStateDict(shard_state));
  step_count_ = state.step_count;
  consolidated_current_ = false;
  consolidated_.reset();
  return absl::OkStatus();
}

size_t ZeroRedundancyOptimizer::state_bytes() const {
  size_t bytes = 0;
  for (const auto& [key, tensor] : inner_->StateDict().tensors) bytes += tensor.nbytes();
  return bytes;
}

}  // namespace ddp
