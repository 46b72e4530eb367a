// The Reducer's iteration flow; see Note [Reducer flow] in reducer.h.
#include "reducer/reducer.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "reducer/unused_parameters.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

namespace ddp {

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names, ProcessGroup* group,
                 ReducerOptions options)
    : params_(std::move(params)),
      names_(std::move(names)),
      group_(group),
      options_(std::move(options)),
      trace_(group->rank()) {
  DDP_CHECK(names_.size() == params_.size()) << "Reducer: " << names_.size() << " names for " << params_.size()
                                             << " parameters";
  if (options_.comm_hook == nullptr) options_.comm_hook = std::make_shared<AllReduceHook>();
  for (const Tensor& p : params_) {
    DDP_CHECK(p.is_leaf() && p.requires_grad() && p.dtype() == DType::kFloat32)
        << "Reducer: parameter '" << p.name() << "' must be a float32 leaf that requires grad";
    specs_.push_back({p.numel(), p.dtype(), p.device()});
  }
  BuildBuckets(AssignBuckets(specs_, {options_.first_bucket_cap_bytes, options_.bucket_cap_bytes}));
  for (size_t i = 0; i < params_.size(); ++i) {
    hook_ids_.push_back(params_[i].RegisterPostAccumulateGradHook([this, i](const Tensor&) { OnGradientReady(i); }));
  }
  ready_.assign(params_.size(), false);
  locally_used_.assign(params_.size(), false);
  unused_this_pass_.assign(params_.size(), false);
  passthrough_ = group_->size() == 1 && dynamic_cast<AllReduceHook*>(options_.comm_hook.get()) != nullptr;
}

Reducer::~Reducer() {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].RemovePostAccumulateGradHook(hook_ids_[i]);
}

std::string Reducer::DescribeBuckets() const { return ddp::DescribeBuckets(assignment_, specs_, names_); }

absl::Status Reducer::PrepareForBackward(const std::vector<Tensor>& outputs, absl::Time forward_start) {
  DDP_RETURN_IF_ERROR(status_);
  if (rebuild_pending_) {
    rebuild_pending_ = false;
    status_ = RebuildBuckets();
    DDP_RETURN_IF_ERROR(status_);
  }
  forward_start_ = forward_start;
  backward_start_ = absl::Now();
  expect_hooks_ = true;
  callback_queued_ = false;
  finalizing_ = false;
  next_bucket_ = 0;
  ready_.assign(params_.size(), false);
  for (Bucket& bucket : buckets_) {
    bucket.pending = bucket.params.size();
    bucket.work = nullptr;
  }
  if (options_.find_unused_parameters) {
    const std::vector<bool> used = FindUsedParameters(outputs, params_);
    for (size_t i = 0; i < used.size(); ++i) unused_this_pass_[i] = !used[i];
  }
  return absl::OkStatus();
}

void Reducer::OnGradientReady(size_t index) {
  if (options_.find_unused_parameters) locally_used_[index] = true;
  if (!expect_hooks_ || !status_.ok()) return;  // no_sync, or a broken iteration
  if (passthrough_) {  // Note [World size 1]: only the bookkeeping that detects unused parameters
    if (!callback_queued_) {
      callback_queued_ = true;
      QueueBackwardFinishedCallback([this] { FinalizePassthrough(); });
      if (options_.find_unused_parameters) {
        for (size_t i = 0; i < params_.size(); ++i) ready_[i] = ready_[i] || unused_this_pass_[i];
      }
    }
    ready_[index] = true;
    return;
  }
  if (!callback_queued_) {
    callback_queued_ = true;
    QueueBackwardFinishedCallback([this] { Finalize(); });
    if (options_.find_unused_parameters) {
      for (size_t i = 0; i < params_.size(); ++i) {
        if (unused_this_pass_[i] && !ready_[i]) MarkReady(i, /*used=*/false);
      }
    }
  }
  if (ready_[index]) {
    status_ = absl::InternalError(absl::StrCat("gradient of '", names_[index],
                                               "' became ready twice in one backward pass"));
    return;
  }
  MarkReady(index, /*used=*/true);
}

void Reducer::MarkReady(size_t index, bool used) {
  ready_[index] = true;
  if (!rebuilt_) ready_order_.push_back(index);
  const Slot& slot = slots_[index];
  const float scale = 1.0f / static_cast<float>(group_->size());
  if (!used) {
    FillInPlace(slot.view, 0.0f);
  } else {
    Tensor grad = params_[index].grad();
    const bool is_view = grad.storage() == slot.view.storage() && grad.storage_offset() == slot.view.storage_offset();
    if (is_view) {
      MulScalarInPlace(slot.view, scale);
    } else {
      CopyScaledInPlace(slot.view, grad, scale);
      // With gradient_as_bucket_view the gradient now aliases its slot: no copies from here on.
      if (options_.gradient_as_bucket_view) params_[index].set_grad(slot.view);
    }
  }
  if (options_.record_trace) {
    trace_.Instant(absl::StrCat("grad ready: ", names_[index]), TraceRecorder::kComputeTrack, absl::Now());
  }
  Bucket& bucket = buckets_[slot.bucket];
  if (--bucket.pending == 0) LaunchReadyBuckets();
}

void Reducer::LaunchReadyBuckets() {
  if (options_.delay_reduction && !finalizing_) return;  // the "no overlap" ablation: Finalize launches
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& bucket = buckets_[next_bucket_];
    bucket.launch_time = absl::Now();
    bucket.work = options_.comm_hook->RunHook(*group_, GradBucket{static_cast<int>(next_bucket_), bucket.buffer});
    if (options_.record_trace) {
      trace_.Instant(absl::StrCat("launch bucket ", next_bucket_), TraceRecorder::kComputeTrack, bucket.launch_time,
                     absl::StrCat("\"bytes\": ", bucket.buffer.nbytes()));
    }
    ++next_bucket_;
  }
}

std::string Reducer::UnreadyParameterNames() const {
  std::vector<std::string> names;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!ready_[i]) names.push_back(names_[i]);
  }
  return absl::StrJoin(names, ", ");
}

void Reducer::FinalizePassthrough() {
  const absl::Time backward_end = absl::Now();
  expect_hooks_ = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!ready_[i]) {
      status_ = absl::FailedPreconditionError(absl::StrCat(
          "DDP: the backward pass gave no gradient to these parameters (rank 0): ", UnreadyParameterNames(),
          ". If the model has parameters that do not take part in producing the loss, pass "
          "find_unused_parameters=true (--find_unused_parameters) to DistributedDataParallel."));
      return;
    }
  }
  RecordIteration(backward_end);
}

void Reducer::Finalize() {
  const absl::Time backward_end = absl::Now();
  expect_hooks_ = false;
  if (!status_.ok()) return;
  finalizing_ = true;
  if (options_.delay_reduction) LaunchReadyBuckets();
  if (next_bucket_ < buckets_.size()) {
    status_ = absl::FailedPreconditionError(absl::StrCat(
        "DDP: the backward pass gave no gradient to these parameters (rank ", group_->rank(),
        "): ", UnreadyParameterNames(),
        ". Their buckets were never reduced, so this iteration's gradients are not averaged. If the model has "
        "parameters that do not take part in producing the loss, pass find_unused_parameters=true "
        "(--find_unused_parameters) to DistributedDataParallel."));
    WaitForBuckets().IgnoreError();  // keep the launched collectives matched before reporting
    return;
  }
  status_ = WaitForBuckets();
  if (!status_.ok()) return;
  std::vector<bool> globally_used(params_.size(), true);
  if (options_.find_unused_parameters) {
    status_ = ReduceUsedMap(&globally_used);
    if (!status_.ok()) return;
  }
  WriteBackGradients(globally_used);
  RecordIteration(backward_end);
  if (options_.rebuild_buckets && !rebuilt_) rebuild_pending_ = true;
}

absl::Status Reducer::WaitForBuckets() {
  // CPU buckets: block until each reduction is done. Device buckets (NCCL): make the compute stream wait
  // on the communication stream instead; the host never blocks on communication, and the gradient
  // write-back that follows is ordered after the reductions on the device (Note [Reducer flow] step 5).
  const bool on_device = !params_.empty() && !params_.front().device().is_cpu();
  for (size_t b = 0; b < next_bucket_; ++b) {
    if (buckets_[b].work == nullptr) continue;
    absl::Status status = on_device ? buckets_[b].work->WaitStream() : buckets_[b].work->Wait(group_->timeout());
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("DDP bucket ", b, " of ", buckets_.size(), ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Reducer::ReduceUsedMap(std::vector<bool>* globally_used) {
  Tensor used = Tensor::Empty({static_cast<int64_t>(params_.size())}, DType::kInt64);
  for (size_t i = 0; i < params_.size(); ++i) used.data<int64_t>()[i] = locally_used_[i] ? 1 : 0;
  // The map travels on the parameters' device (NCCL takes device tensors only), then comes back.
  const Device device = params_.front().device();
  Tensor reduced = device.is_cpu() ? used : ToDevice(used, device);
  absl::Status status = group_->AllReduce(reduced, ReduceOp::kSum)->Wait(group_->timeout());
  if (!status.ok()) return absl::Status(status.code(), absl::StrCat("DDP used-parameter map: ", status.message()));
  if (!device.is_cpu()) used = ToDevice(reduced, Device::CPU());
  for (size_t i = 0; i < params_.size(); ++i) (*globally_used)[i] = used.data<int64_t>()[i] > 0;
  locally_used_.assign(params_.size(), false);
  return absl::OkStatus();
}

void Reducer::WriteBackGradients(const std::vector<bool>& globally_used) {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!globally_used[i]) continue;  // unused on every rank: keeps no gradient (PyTorch)
    const Tensor& param = params_[i];
    const Tensor& view = slots_[i].view;
    Tensor grad = param.grad();
    if (!grad.defined()) {
      // Locally unused but used elsewhere: the parameter gets the averaged gradient.
      param.set_grad(options_.gradient_as_bucket_view ? view : Clone(view));
    } else if (!(grad.storage() == view.storage() && grad.storage_offset() == view.storage_offset())) {
      CopyInPlace(grad, view);
    }
  }
}

void Reducer::RecordIteration(absl::Time backward_end) {
  IterationStats stats;
  stats.iteration = static_cast<int64_t>(stats_.size());
  stats.buckets = static_cast<int>(buckets_.size());
  stats.forward_s = absl::ToDoubleSeconds(backward_start_ - forward_start_);
  stats.backward_compute_s = absl::ToDoubleSeconds(backward_end - backward_start_);
  std::vector<TimeInterval> comm;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    if (bucket.work == nullptr) continue;
    comm.push_back({bucket.work->StartTime(), bucket.work->EndTime()});
    if (options_.record_trace) {
      trace_.Span(absl::StrCat("bucket ", b, " ", options_.comm_hook->name()), TraceRecorder::kCommTrack,
                  bucket.work->StartTime(), bucket.work->EndTime(),
                  absl::StrCat("\"bytes\": ", bucket.buffer.nbytes(), ", \"params\": ", bucket.params.size()));
    }
  }
  ComputeOverlap(comm, backward_end, &stats);
  if (options_.record_trace) {
    trace_.Span("forward", TraceRecorder::kComputeTrack, forward_start_, backward_start_);
    trace_.Span("backward", TraceRecorder::kComputeTrack, backward_start_, backward_end);
  }
  stats_.push_back(stats);
}

}  // namespace ddp
