#include "ddp/join.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensor/autograd.h"
#include "base/check.h"

namespace ddp {

Join::Join(DistributedDataParallel* ddp, JoinOptions options) : ddp_(ddp), options_(options) {
  DDP_CHECK(ddp_ != nullptr) << "Join needs a DistributedDataParallel module";
  if (!options_.enable) return;
  DDP_CHECK(ddp_->join_ == nullptr) << "Join: another Join is already active on this DDP module";
  ddp_->join_ = this;
}

Join::~Join() {
  if (options_.enable) ddp_->join_ = nullptr;
}

absl::Status Join::ExchangeSlots(bool training, bool syncs) {
  const int world = ddp_->group().size();
  Tensor slots = Tensor::Empty({world + 2}, DType::kInt64);
  int64_t* data = slots.data<int64_t>();
  std::fill(data, data + world + 2, 0);
  data[ddp_->group().rank()] = training ? 1 : 0;
  data[world] = training && syncs ? 1 : 0;
  data[world + 1] = stop_requested_ ? 1 : 0;
  const absl::Status status = ddp_->group().AllReduceHost(slots, ReduceOp::kSum);
  if (!status.ok()) return absl::Status(status.code(), absl::StrCat("Join: ", status.message()));
  slots_.assign(data, data + world + 2);
  stop_agreed_ = data[world + 1] > 0;
  if (TrainingRanks() > 0) last_round_ = slots_;
  return absl::OkStatus();
}

int Join::TrainingRanks() const {
  int training = 0;
  for (size_t r = 0; r + 2 < slots_.size(); ++r) training += slots_[r] > 0;
  return training;
}

std::vector<int> Join::StoppedRanks() const {
  std::vector<int> stopped;
  for (size_t r = 0; r + 2 < slots_.size(); ++r) {
    if (slots_[r] == 0) stopped.push_back(static_cast<int>(r));
  }
  return stopped;
}

absl::Status Join::EarlyTerminationError() const {
  const std::vector<int> stopped = StoppedRanks();
  return absl::FailedPreconditionError(
      absl::StrCat("Join (throw_on_early_termination): ", stopped.size() == 1 ? "rank " : "ranks ",
                   absl::StrJoin(stopped, ", "), " ran out of data while ", TrainingRanks(),
                   " still had batches; every rank stops here"));
}

absl::Status Join::AnnounceTraining(bool syncs) {
  DDP_RETURN_IF_ERROR(failed_);
  failed_ = ExchangeSlots(/*training=*/true, syncs);
  if (failed_.ok() && options_.throw_on_early_termination && TrainingRanks() < ddp_->group().size()) {
    failed_ = EarlyTerminationError();
  }
  DDP_RETURN_IF_ERROR(failed_);
  if (!options_.divide_by_initial_world_size) ddp_->reducer_->SetGradientDivisor(TrainingRanks());
  return absl::OkStatus();
}

absl::Status Join::ShadowStep() {
  const int world = ddp_->group().size();
  if (!options_.divide_by_initial_world_size) ddp_->reducer_->SetGradientDivisor(TrainingRanks());
  if (ddp_->options_.broadcast_buffers) DDP_RETURN_IF_ERROR(ddp_->BroadcastBuffers());
  if (slots_[world] == 0) return absl::OkStatus();  // the others are inside NoSync: nothing to reduce
  DDP_RETURN_IF_ERROR(ddp_->reducer_->PrepareForBackward({}, absl::Now()));
  return ddp_->reducer_->ShadowBackward();
}

absl::Status Join::Finish() {
  DDP_CHECK(!finished_) << "Join::Finish called twice";
  finished_ = true;
  if (!options_.enable) return absl::OkStatus();
  DDP_RETURN_IF_ERROR(failed_);
  for (;;) {
    DDP_RETURN_IF_ERROR(ExchangeSlots(/*training=*/false, /*syncs=*/false));
    if (TrainingRanks() == 0) break;
    if (options_.throw_on_early_termination) return EarlyTerminationError();
    DDP_RETURN_IF_ERROR(ShadowStep());
  }
  if (!options_.divide_by_initial_world_size) ddp_->reducer_->SetGradientDivisor(ddp_->group().size());
  for (int r = static_cast<int>(last_round_.size()) - 3; r >= 0; --r) {
    if (last_round_[r] > 0) {
      last_joiner_ = r;
      break;
    }
  }
  if (last_joiner_ < 0) return absl::OkStatus();  // no rank trained a step: the replicas never changed
  NoGradGuard no_grad;
  std::vector<Tensor> state = ddp_->module().Parameters();
  for (const Tensor& b : ddp_->module().Buffers()) state.push_back(b);
  const absl::Status synced =
      BroadcastCoalesced(state, ddp_->group(), last_joiner_, ddp_->options_.broadcast_chunk_bytes);
  if (!synced.ok()) {
    return absl::Status(synced.code(), absl::StrCat("Join: taking rank ", last_joiner_,
                                                    "'s model: ", synced.message()));
  }
  return absl::OkStatus();
}

}  // namespace ddp
