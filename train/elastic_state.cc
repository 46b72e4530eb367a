#include "train/elastic_state.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "nn/safetensors.h"

namespace ddp {
namespace {

constexpr char kModelPrefix[] = "model.";
constexpr char kOptimizerPrefix[] = "optimizer.";

// The integer metadata entry `key` of `metadata`, or an error naming it and `source`.
absl::StatusOr<int64_t> IntegerEntry(const SafetensorsMetadata& metadata, const std::string& key,
                                     const std::string& source) {
  const auto it = metadata.find(key);
  int64_t value = 0;
  if (it == metadata.end() || !absl::SimpleAtoi(it->second, &value)) {
    return absl::DataLossError(absl::StrCat("the elastic state from ", source, " has no integer \"", key, "\""));
  }
  return value;
}

}  // namespace

absl::StatusOr<std::string> EncodeElasticState(const ElasticTrainingState& state) {
  DDP_CHECK(state.model != nullptr && state.optimizer != nullptr) << "EncodeElasticState needs a model and optimizer";
  NamedTensors tensors;
  for (const auto& [name, tensor] : state.model->StateDict()) tensors.emplace_back(kModelPrefix + name, tensor);
  const OptimizerState optimizer = state.optimizer->StateDict();
  for (const auto& [key, tensor] : optimizer.tensors) tensors.emplace_back(kOptimizerPrefix + key, tensor);
  SafetensorsMetadata metadata = {{"global_step", absl::StrCat(state.global_step)},
                                  {"optimizer_step_count", absl::StrCat(optimizer.step_count)},
                                  {"sampler", state.position.ToText()}};
  if (!state.bucket_order.empty()) metadata["bucket_order"] = state.bucket_order;
  return SerializeSafetensors(tensors, metadata);
}

absl::Status DecodeElasticState(const std::string& bytes, const std::string& source, ElasticTrainingState& state) {
  DDP_CHECK(state.model != nullptr && state.optimizer != nullptr) << "DecodeElasticState needs a model and optimizer";
  DDP_ASSIGN_OR_RETURN(SafetensorsContents contents, ParseSafetensors(bytes, source));
  NamedTensors model;
  OptimizerState optimizer;
  for (auto& [name, tensor] : contents.tensors) {
    if (absl::StartsWith(name, kModelPrefix)) {
      model.emplace_back(name.substr(sizeof(kModelPrefix) - 1), std::move(tensor));
    } else if (absl::StartsWith(name, kOptimizerPrefix)) {
      optimizer.tensors.emplace_back(name.substr(sizeof(kOptimizerPrefix) - 1), std::move(tensor));
    } else {
      return absl::DataLossError(absl::StrCat("the elastic state from ", source, " holds an unknown tensor \"", name, "\""));
    }
  }
  DDP_ASSIGN_OR_RETURN(const int64_t global_step, IntegerEntry(contents.metadata, "global_step", source));
  DDP_ASSIGN_OR_RETURN(optimizer.step_count, IntegerEntry(contents.metadata, "optimizer_step_count", source));
  const auto sampler = contents.metadata.find("sampler");
  if (sampler == contents.metadata.end()) {
    return absl::DataLossError(absl::StrCat("the elastic state from ", source, " has no sampler position"));
  }
  DDP_ASSIGN_OR_RETURN(const SamplerState position, SamplerState::FromText(sampler->second));
  // Both loads validate before they change anything; the model's first, so that a mismatched optimizer
  // state is the only way to leave a half-loaded rank, and that rank then fails.
  DDP_RETURN_IF_ERROR(state.model->LoadStateDict(model, /*strict=*/true));
  DDP_RETURN_IF_ERROR(state.optimizer->LoadStateDict(optimizer));
  state.global_step = global_step;
  state.position = position;
  const auto order = contents.metadata.find("bucket_order");
  state.bucket_order = order == contents.metadata.end() ? "" : order->second;
  return absl::OkStatus();
}

absl::Status BroadcastElasticState(ProcessGroup& group, int root, ElasticTrainingState& state) {
  std::string bytes;
  if (group.rank() == root) {
    DDP_ASSIGN_OR_RETURN(bytes, EncodeElasticState(state));
  }
  DDP_RETURN_IF_ERROR(group.BroadcastObject(&bytes, root));
  if (group.rank() == root) return absl::OkStatus();
  return DecodeElasticState(bytes, absl::StrCat("rank ", root), state);
}

}  // namespace ddp
