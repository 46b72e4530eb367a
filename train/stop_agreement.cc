#include "train/stop_agreement.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ddp {

absl::Status StopAgreement::BeginStep(bool stop_requested) {
  requested_ = stop_requested;
  if (group_ == nullptr) return absl::OkStatus();
  if (join_ != nullptr) {
    join_->set_stop_requested(stop_requested);
    return absl::OkStatus();
  }
  flag_ = Tensor::Empty({1}, DType::kInt64);
  *flag_.data<int64_t>() = stop_requested ? 1 : 0;
  if (group_->tensor_device().is_cpu()) work_ = group_->AllReduce(flag_, ReduceOp::kSum);  // overlaps the step
  return absl::OkStatus();
}

absl::StatusOr<bool> StopAgreement::EndStep() {
  if (group_ == nullptr) return requested_;
  if (join_ != nullptr) return join_->stop_agreed();
  absl::Status status = work_ != nullptr ? work_->Wait(group_->timeout()) : group_->AllReduceHost(flag_);
  work_.reset();
  if (!status.ok()) return absl::Status(status.code(), absl::StrCat("agreeing on a stop step: ", status.message()));
  return *flag_.data<int64_t>() > 0;
}

}  // namespace ddp
