// Bucket buffers, parameter slots and the one-time rebuild (Note [Bucket rebuild] in reducer.h).
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "reducer/reducer.h"
#include "tensor/ops.h"

namespace ddp {

void Reducer::BuildBuckets(const std::vector<std::vector<size_t>>& assignment) {
  assignment_ = assignment;
  buckets_.clear();
  buckets_.resize(assignment.size());
  slots_.assign(params_.size(), Slot{});
  for (size_t b = 0; b < assignment.size(); ++b) {
    Bucket& bucket = buckets_[b];
    bucket.params = assignment[b];
    int64_t total = 0;
    for (size_t index : bucket.params) total += params_[index].numel();
    bucket.buffer = Tensor::Empty({total}, DType::kFloat32, params_[bucket.params.front()].device());
    FillInPlace(bucket.buffer, 0.0f);
    int64_t offset = 0;
    for (size_t index : bucket.params) {
      const Tensor& p = params_[index];
      slots_[index].bucket = b;
      slots_[index].view = Tensor::View(bucket.buffer.storage(), p.shape(), ContiguousStrides(p.shape()),
                                        bucket.buffer.storage_offset() + offset, DType::kFloat32);
      offset += p.numel();
    }
  }
  // Gradients that already are bucket views move to their new slots (values kept).
  if (options_.gradient_as_bucket_view) {
    for (size_t i = 0; i < params_.size(); ++i) {
      Tensor grad = params_[i].grad();
      if (!grad.defined()) continue;
      CopyInPlace(slots_[i].view, grad);
      params_[i].set_grad(slots_[i].view);
    }
  }
}

absl::StatusOr<std::vector<size_t>> Reducer::ParseGradientOrder(absl::string_view order_text) const {
  std::vector<size_t> order;
  std::vector<bool> seen(params_.size(), false);
  for (absl::string_view token : absl::StrSplit(order_text, ',', absl::SkipEmpty())) {
    size_t index = 0;
    if (!absl::SimpleAtoi(token, &index) || index >= params_.size() || seen[index]) {
      return absl::DataLossError(absl::StrCat("DDP bucket order \"", order_text, "\" is not a list of distinct ",
                                              "parameter indices below ", params_.size()));
    }
    seen[index] = true;
    order.push_back(index);
  }
  // Parameters that never became ready on rank 0 go last, in reverse registration order.
  for (size_t i = params_.size(); i-- > 0;) {
    if (!seen[i]) order.push_back(i);
  }
  return order;
}

void Reducer::BuildBucketsInOrder(const std::vector<size_t>& order) {
  BuildBuckets(AssignBuckets(specs_, {options_.first_bucket_cap_bytes, options_.bucket_cap_bytes}, order));
  rebuilt_order_ = order;
  rebuilt_ = true;
  ready_order_.clear();
}

absl::Status Reducer::RebuildBuckets() {
  // Rank 0's ready order, as text, so every rank builds the same layout.
  std::string order_text = absl::StrJoin(ready_order_, ",");
  DDP_RETURN_IF_ERROR(group_->BroadcastObject(&order_text, 0));
  absl::StatusOr<std::vector<size_t>> order = ParseGradientOrder(order_text);
  if (!order.ok()) return absl::DataLossError(absl::StrCat("DDP bucket rebuild: rank 0 sent a bad gradient order: ",
                                                           order.status().message()));
  BuildBucketsInOrder(*order);
  return absl::OkStatus();
}

std::string Reducer::RebuiltOrderText() const {
  if (rebuilt_) return absl::StrJoin(rebuilt_order_, ",");
  if (!rebuild_pending_) return "";
  // Between the first synchronised iteration and the next PrepareForBackward: the order the rebuild is
  // about to use (this rank's ready order, which rank 0 will broadcast).
  absl::StatusOr<std::vector<size_t>> pending = ParseGradientOrder(absl::StrJoin(ready_order_, ","));
  return pending.ok() ? absl::StrJoin(*pending, ",") : "";
}

absl::Status Reducer::RestoreBucketOrder(absl::string_view order_text) {
  DDP_CHECK(stats_.empty() && !expect_hooks_) << "RestoreBucketOrder must come before the first backward pass";
  if (order_text.empty()) return absl::OkStatus();
  DDP_ASSIGN_OR_RETURN(std::vector<size_t> order, ParseGradientOrder(order_text));
  BuildBucketsInOrder(order);
  return absl::OkStatus();
}

}  // namespace ddp
