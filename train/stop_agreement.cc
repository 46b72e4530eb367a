#include "train/stop_agreement.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ddp {

absl::Status StopAgreement::BeginStep(bool stop_requested, bool joiner_waiting) {
  requested_ = stop_requested;
  joiner_seen_ = joiner_waiting;
  const bool bit = stop_requested || joiner_waiting;
  if (group_ == nullptr) return absl::OkStatus();
  if (join_ != nullptr) {
    join_->set_stop_requested(bit);
    return absl::OkStatus();
  }
  flag_ = Tensor::Empty({1}, DType::kInt64);
  *flag_.data<int64_t>() = bit ? 1 : 0;
  if (group_->tensor_device().is_cpu()) work_ = group_->AllReduce(flag_, ReduceOp::kSum);  // overlaps the step
  return absl::OkStatus();
}

absl::StatusOr<StopAgreement::Boundary> StopAgreement::EndStep() {
  if (group_ == nullptr) return Boundary{requested_, false};
  bool bit = false;
  if (join_ != nullptr) {
    bit = join_->stop_agreed();
  } else {
    absl::Status status = work_ != nullptr ? work_->Wait(group_->timeout()) : group_->AllReduceHost(flag_);
    work_.reset();
    if (!status.ok()) return absl::Status(status.code(), absl::StrCat("agreeing on a stop step: ", status.message()));
    bit = *flag_.data<int64_t>() > 0;
  }
  if (!bit) return Boundary{};
  return ResolveReasons();
}

absl::StatusOr<StopAgreement::Boundary> StopAgreement::ResolveReasons() {
  Tensor reasons = Tensor::Empty({2}, DType::kInt64);
  reasons.data<int64_t>()[0] = requested_ ? 1 : 0;
  reasons.data<int64_t>()[1] = joiner_seen_ ? 1 : 0;
  absl::Status status = group_->tensor_device().is_cpu() ? group_->AllReduce(reasons, ReduceOp::kSum)->Wait(group_->timeout())
                                                          : group_->AllReduceHost(reasons);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("agreeing on the reason of a step boundary: ", status.message()));
  }
  Boundary boundary;
  boundary.stop = reasons.data<int64_t>()[0] > 0;
  boundary.admit_joiner = !boundary.stop && reasons.data<int64_t>()[1] > 0;  // a stop wins
  return boundary;
}

}  // namespace ddp
