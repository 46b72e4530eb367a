// The Reducer: its iteration (Note [Reducer flow] in reducer.h), bucket buffers and the one-time rebuild
// (Note [Bucket rebuild]). One file because these share one state: the rebuild replaces the buffers the
// iteration fills.
//
// Note [Reducer iteration]
// A synchronised iteration moves through the phases of Reducer::Phase:
//
//   kIdle --PrepareForBackward--> kArmed --first hook--> kBackward --backward finished--> kFinalizing
//     ^                             |                                                         |
//     +--------SkipNextSync---------+------------------------Finalize returns-----------------+
//
// The first hook of an armed pass queues Finalize (autograd's backward-finished callback) and marks the
// unused parameters ready; hooks in kIdle only note local use (no_sync passes, or a backward that no
// synchronising forward armed). Everything that lives for one iteration is in `Iteration`, reset by
// PrepareForBackward; what outlives it is the bucket layout, the used map (it accumulates over no_sync
// passes), the rebuild state (Reducer::Rebuild) and the first error. An error stops the machine: hooks
// and Finalize do nothing more and PrepareForBackward returns it. Note [World size 1] is no separate
// path: `reduces_` skips the steps that would change nothing.
#include "reducer/reducer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "reducer/bucket_cast.h"
#include "reducer/unused_parameters.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

// Whether `a` and `b` are the same region of the same storage.
bool SameRegion(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.storage_offset() == b.storage_offset();
}

// Note [World size 1]: one rank and the plain all-reduce hook reduce nothing (unless a test asks for the
// whole bucketed path anyway: ReducerAblations::reduce_at_world_size_1). A 16-bit reduce dtype rounds
// even there, as on many ranks.
bool Reduces(const ProcessGroup& group, const ReducerOptions& options) {
  return group.size() > 1 || options.ablations.reduce_at_world_size_1 || options.reduce_dtype != DType::kFloat32 ||
         (options.comm_hook != nullptr && dynamic_cast<const AllReduceHook*>(options.comm_hook.get()) == nullptr);
}

}  // namespace

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names, ProcessGroup* group,
                 ReducerOptions options)
    : params_(std::move(params)),
      names_(std::move(names)),
      group_(group),
      options_(std::move(options)),
      reduces_(Reduces(*group, options_)),
      gradient_divisor_(group->size()),
      trace_(group->rank()) {
  DDP_CHECK(names_.size() == params_.size()) << "Reducer: " << names_.size() << " names for " << params_.size()
                                             << " parameters";
  if (options_.comm_hook == nullptr) options_.comm_hook = std::make_shared<AllReduceHook>();
  UpdateAveraging();
  for (const Tensor& p : params_) {
    DDP_CHECK(p.is_leaf() && p.requires_grad() && p.dtype() == DType::kFloat32)
        << "Reducer: parameter '" << p.name() << "' must be a float32 leaf that requires grad";
    specs_.push_back({p.numel(), p.dtype(), p.device()});
  }
  const absl::Status reduce_dtype = CheckReduceDtype(options_.reduce_dtype);
  DDP_CHECK(reduce_dtype.ok()) << "Reducer: " << reduce_dtype.message();
  if (options_.reduce_dtype != DType::kFloat32) {
    DDP_CHECK(!options_.gradient_as_bucket_view)
        << "Reducer: reduce dtype " << DTypeName(options_.reduce_dtype)
        << " cannot be combined with gradient_as_bucket_view (a float32 .grad cannot view a "
        << DTypeName(options_.reduce_dtype) << " bucket)";
  }
  BuildBuckets(AssignBuckets(specs_, options_.caps));
  for (size_t i = 0; i < params_.size(); ++i) {
    hook_ids_.push_back(params_[i].RegisterPostAccumulateGradHook([this, i](const Tensor&) { OnGradientReady(i); }));
  }
  locally_used_.assign(params_.size(), false);
  rebuild_ = options_.rebuild_buckets && reduces_ ? Rebuild::kRecording : Rebuild::kOff;
  if (options_.record_stats) observers_.push_back(&stats_);
  if (options_.record_trace) observers_.push_back(&trace_);
}

Reducer::~Reducer() {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].RemovePostAccumulateGradHook(hook_ids_[i]);
}

std::string Reducer::DescribeBuckets() const {
  std::optional<DType> bucket_dtype;
  if (options_.reduce_dtype != DType::kFloat32) bucket_dtype = options_.reduce_dtype;
  return ddp::DescribeBuckets(assignment_, specs_, names_, bucket_dtype);
}

void Reducer::AddObserver(ReducerObserver* observer) {
  DDP_CHECK(observer != nullptr && (phase_ == Phase::kIdle || phase_ == Phase::kArmed))
      << "Reducer::AddObserver needs an observer, outside a backward pass";
  observers_.push_back(observer);
}

template <typename Event>
void Reducer::Notify(void (ReducerObserver::*method)(const Event&), const Event& event) {
  for (ReducerObserver* observer : observers_) (observer->*method)(event);
}

// ---- Bucket buffers and the rebuild (Note [Bucket rebuild]) ----

void Reducer::BuildBuckets(const std::vector<std::vector<size_t>>& assignment) {
  assignment_ = assignment;
  buckets_.clear();
  buckets_.resize(assignment.size());
  slots_.assign(params_.size(), Slot{});
  for (size_t b = 0; b < assignment.size(); ++b) {
    Bucket& bucket = buckets_[b];
    bucket.layout.clear();
    bucket.params = assignment[b];
    int64_t total = 0;
    for (size_t index : bucket.params) total += params_[index].numel();
    // From the group: over shm the peers then read the bucket in place (Note [Zero-copy all-reduce]).
    // Its dtype is the reduce dtype (Note [Reduce dtype rounding] in reducer/bucket_cast.h); bucket caps
    // count the float32 gradients, so a bfloat16 layout has the same buckets at half the bytes.
    const DType dtype = options_.reduce_dtype;
    bucket.buffer = group_->NewCommBuffer(total, dtype, params_[bucket.params.front()].device());
    ZeroSlot(bucket.buffer);
    int64_t offset = 0;
    for (size_t index : bucket.params) {
      const Tensor& p = params_[index];
      slots_[index].bucket = b;
      slots_[index].view = Tensor::View(bucket.buffer.storage(), p.shape(), ContiguousStrides(p.shape()),
                                        bucket.buffer.storage_offset() + offset, dtype);
      bucket.layout.push_back({index, names_[index], p.shape(), offset, p.numel(), slots_[index].view});
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

void Reducer::BuildBucketsInOrder(const std::vector<size_t>& order) {
  BuildBuckets(AssignBuckets(specs_, options_.caps, order));
  rebuilt_order_ = order;
  rebuild_ = Rebuild::kDone;
  ready_order_.clear();
}

absl::Status Reducer::RebuildBuckets() {
  // Rank 0's ready order, as text, so every rank builds the same layout.
  std::string order_text = GradientOrderText(ready_order_);
  DDP_RETURN_IF_ERROR(group_->BroadcastObject(&order_text, 0));
  absl::StatusOr<std::vector<size_t>> order = ParseGradientOrder(order_text, params_.size());
  if (!order.ok()) {
    return absl::DataLossError(
        absl::StrCat("DDP bucket rebuild: rank 0 sent a bad gradient order: ", order.status().message()));
  }
  BuildBucketsInOrder(*order);
  return absl::OkStatus();
}

std::string Reducer::RebuiltOrderText() const {
  if (rebuild_ == Rebuild::kDone) return GradientOrderText(rebuilt_order_);
  if (rebuild_ != Rebuild::kPending) return "";
  // Between the first synchronised iteration and the next PrepareForBackward: the order the rebuild is
  // about to use (this rank's ready order, which rank 0 will broadcast).
  absl::StatusOr<std::vector<size_t>> pending =
      ParseGradientOrder(GradientOrderText(ready_order_), params_.size());
  return pending.ok() ? GradientOrderText(*pending) : "";
}

absl::Status Reducer::RestoreBucketOrder(absl::string_view order_text) {
  DDP_CHECK(finished_iterations_ == 0 && phase_ == Phase::kIdle)
      << "RestoreBucketOrder must come before the first backward pass";
  if (order_text.empty()) return absl::OkStatus();
  DDP_ASSIGN_OR_RETURN(std::vector<size_t> order, ParseGradientOrder(order_text, params_.size()));
  BuildBucketsInOrder(order);
  return absl::OkStatus();
}

void Reducer::Rebucket(const BucketCaps& caps) {
  DDP_CHECK(phase_ == Phase::kIdle) << "Reducer::Rebucket needs a Reducer between iterations (not armed)";
  options_.caps = caps;
  if (rebuild_ == Rebuild::kDone) {
    BuildBucketsInOrder(rebuilt_order_);
  } else {
    BuildBuckets(AssignBuckets(specs_, options_.caps));
  }
}

void internal::SetReducerAblations(Reducer& reducer, const internal::ReducerAblations& ablations) {
  DDP_CHECK(reducer.phase_ == Reducer::Phase::kIdle)
      << "SetReducerAblations needs a Reducer between iterations (not armed)";
  reducer.options_.ablations = ablations;
}

// ---- The iteration (Note [Reducer iteration]) ----

absl::Status Reducer::PrepareForBackward(const std::vector<Tensor>& outputs, absl::Time forward_start) {
  DDP_RETURN_IF_ERROR(status_);
  if (rebuild_ == Rebuild::kPending) {
    rebuild_ = Rebuild::kOff;  // a failed rebuild is not retried (the error stops the Reducer)
    status_ = RebuildBuckets();
    DDP_RETURN_IF_ERROR(status_);
  }
  StartIteration(forward_start);
  if (options_.find_unused_parameters && static_recorded_) {
    iteration_.unused = static_unused_;  // static_graph: the first iteration's search
  } else if (options_.find_unused_parameters) {
    const std::vector<bool> used = FindUsedParameters(outputs, params_);
    for (size_t i = 0; i < used.size(); ++i) iteration_.unused[i] = !used[i];
  }
  phase_ = Phase::kArmed;
  return absl::OkStatus();
}

void Reducer::StartIteration(absl::Time forward_start) {
  iteration_.ready.assign(params_.size(), false);
  iteration_.unused.assign(params_.size(), false);
  iteration_.pending.clear();
  for (const Bucket& bucket : buckets_) iteration_.pending.push_back(bucket.params.size());
  iteration_.works.assign(buckets_.size(), nullptr);
  iteration_.bytes_sent.assign(buckets_.size(), 0);
  iteration_.next_bucket = 0;
  if (observed()) {
    iteration_.forward_start = forward_start;
    iteration_.backward_start = absl::Now();
  }
}

absl::Status Reducer::ShadowBackward() {
  DDP_RETURN_IF_ERROR(status_);
  DDP_CHECK(phase_ == Phase::kArmed) << "ShadowBackward needs a Reducer armed by PrepareForBackward";
  phase_ = Phase::kBackward;  // no autograd pass: Finalize runs below instead of from its callback
  for (size_t i = params_.size(); i-- > 0;) {
    if (!iteration_.ready[i]) MarkReady(i, Contribution::kZeros);
  }
  Finalize();
  return status_;
}

void Reducer::SetGradientDivisor(int divisor) {
  DDP_CHECK(divisor > 0 && (phase_ == Phase::kIdle || phase_ == Phase::kArmed))
      << "SetGradientDivisor(" << divisor << ") needs a positive divisor, outside a backward pass";
  gradient_divisor_ = divisor;
  UpdateAveraging();
}

void Reducer::SetCommHook(std::shared_ptr<CommHook> hook) {
  DDP_CHECK(finished_iterations_ == 0 && phase_ == Phase::kIdle && ready_order_.empty())
      << "Reducer::SetCommHook must come before the first backward pass";
  options_.comm_hook = hook != nullptr ? std::move(hook) : std::make_shared<AllReduceHook>();
  UpdateAveraging();
  const bool reduced = reduces_;
  reduces_ = Reduces(*group_, options_);
  // A hook that makes world size 1 reduce after all also records the order for the rebuild.
  if (reduces_ && !reduced && options_.rebuild_buckets && rebuild_ == Rebuild::kOff) rebuild_ = Rebuild::kRecording;
  if (!reduces_ && rebuild_ == Rebuild::kRecording) rebuild_ = Rebuild::kOff;
}

void Reducer::SkipNextSync() {
  DDP_CHECK(phase_ == Phase::kIdle || phase_ == Phase::kArmed) << "SkipNextSync inside a backward pass";
  phase_ = Phase::kIdle;
}

void Reducer::OnGradientReady(size_t index) {
  if (options_.find_unused_parameters) locally_used_[index] = true;
  if (!status_.ok() || phase_ == Phase::kIdle) return;  // a broken iteration, or no_sync
  DDP_CHECK(phase_ != Phase::kFinalizing) << "a gradient hook fired while the Reducer finalized";
  if (phase_ == Phase::kArmed) BeginBackward();
  if (iteration_.ready[index]) {
    status_ = absl::InternalError(absl::StrCat("gradient of '", names_[index],
                                               "' became ready twice in one backward pass"));
    return;
  }
  MarkReady(index, Contribution::kGradient);
}

void Reducer::BeginBackward() {
  phase_ = Phase::kBackward;
  QueueBackwardFinishedCallback([this] { Finalize(); });
  if (!options_.find_unused_parameters) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (iteration_.unused[i] && !iteration_.ready[i]) MarkReady(i, Contribution::kHeldGradient);
  }
}

// Note [Gradients of unused parameters]
// A parameter that gets no gradient in a synchronised pass still fills its bucket slot, so that every
// rank reduces the same buckets. What it contributes follows PyTorch's reducer: whatever its .grad
// already holds, and zeros only when it holds none. After ZeroGrad that is zeros either way; but a
// parameter used in a no_sync pass and unused in the synchronising one holds its accumulated local
// gradient, and that must enter the average (the used map marks it used, so the average is written back
// into .grad: zeros there would replace the accumulation with the other ranks' share alone). Join's
// shadow pass is the exception: the joined rank's .grad is a stale gradient, so it contributes zeros.
//
// Which parameters get no gradient: those the forward's outputs do not reach (the search in
// PrepareForBackward, marked at the first hook so their buckets launch early), and, under
// find_unused_parameters, those the outputs reach but the loss did not, when the loss left an output out
// (an auxiliary head trained on some steps only). Their hooks never fire; Finalize marks them then
// (MarkUnreachedUnused), and their buckets launch at the end of backward, without overlap. PyTorch
// reaches the same result by passing every output through one autograd node (_DDPSink) whose backward
// runs the hooks of the left-out outputs' parameters with undefined gradients. Without
// find_unused_parameters a parameter without gradient is an error, as in PyTorch.
void Reducer::MarkUnreachedUnused() {
  for (size_t i = params_.size(); i-- > 0;) {
    if (iteration_.ready[i]) continue;
    iteration_.unused[i] = true;  // static_graph records it with the search's result
    MarkReady(i, Contribution::kHeldGradient);
  }
}

void Reducer::MarkReady(size_t index, Contribution contribution) {
  iteration_.ready[index] = true;
  if (rebuild_ == Rebuild::kRecording) ready_order_.push_back(index);
  if (reduces_) CopyIntoSlot(index, contribution);
  if (observed()) {
    const bool used = contribution == Contribution::kGradient;
    Notify(&ReducerObserver::OnGradientReady,
           GradientReadyEvent{index, names_[index], params_[index].numel(), used, absl::Now()});
  }
  if (--iteration_.pending[slots_[index].bucket] == 0) LaunchReadyBuckets();
}

void Reducer::CopyIntoSlot(size_t index, Contribution contribution) {
  const Tensor& view = slots_[index].view;
  Tensor grad = params_[index].grad();
  if (contribution == Contribution::kZeros || !grad.defined()) {
    ZeroSlot(view);
    return;
  }
  const float scale = averages_in_collective_ ? 1.0f : 1.0f / static_cast<float>(gradient_divisor_);
  if (SameRegion(grad, view)) {
    if (scale != 1.0f) MulScalarInPlace(view, scale);
    return;
  }
  CastScaledIntoSlot(view, grad, scale);  // rounds to the reduce dtype once (Note [Reduce dtype rounding])
  // With gradient_as_bucket_view the gradient now aliases its slot: no copies from here on.
  if (options_.gradient_as_bucket_view) params_[index].set_grad(view);
}

void Reducer::UpdateAveraging() {
  // A 16-bit bucket is always divided before the rounding (Note [Reduce dtype rounding]).
  averages_in_collective_ = options_.reduce_dtype == DType::kFloat32 && group_->FusesAverage() &&
                            gradient_divisor_ == group_->size() &&
                            dynamic_cast<const AllReduceHook*>(options_.comm_hook.get()) != nullptr;
}

void Reducer::LaunchReadyBuckets() {
  if (options_.ablations.delay_reduction && phase_ != Phase::kFinalizing) return;  // the "no overlap" ablation
  while (iteration_.next_bucket < buckets_.size() && iteration_.pending[iteration_.next_bucket] == 0) {
    if (reduces_) LaunchBucket(iteration_.next_bucket);
    ++iteration_.next_bucket;
  }
}

void Reducer::LaunchBucket(size_t b) {
  const Bucket& bucket = buckets_[b];
  const absl::Time at = observed() ? absl::Now() : absl::Time();
  GradBucket grad_bucket{static_cast<int>(b), bucket.buffer, bucket.layout, b + 1 == buckets_.size()};
  grad_bucket.undivided = averages_in_collective_;
  iteration_.works[b] = options_.comm_hook->RunHook(*group_, grad_bucket);
  iteration_.bytes_sent[b] =
      grad_bucket.bytes_sent >= 0 ? grad_bucket.bytes_sent : static_cast<int64_t>(bucket.buffer.nbytes());
  if (observed()) {
    Notify(&ReducerObserver::OnBucketLaunched,
           BucketLaunchedEvent{static_cast<int>(b), bucket.buffer.nbytes(), at});
  }
}

void Reducer::Finalize() {
  if (observed()) iteration_.backward_end = absl::Now();
  phase_ = Phase::kFinalizing;
  if (status_.ok()) status_ = FinishIteration();
  phase_ = Phase::kIdle;
}

absl::Status Reducer::FinishIteration() {
  if (options_.ablations.delay_reduction) LaunchReadyBuckets();
  if (options_.find_unused_parameters) MarkUnreachedUnused();  // Note [Gradients of unused parameters]
  if (iteration_.next_bucket < buckets_.size()) {
    const absl::Status unready = UnreadyParametersError();
    WaitForBuckets().IgnoreError();  // keep the launched collectives matched before reporting
    return unready;
  }
  DDP_RETURN_IF_ERROR(WaitForBuckets());
  if (reduces_) {
    std::vector<bool> globally_used(params_.size(), true);
    if (options_.find_unused_parameters && static_recorded_) {
      globally_used = static_globally_used_;  // static_graph: no used-map all-reduce after the first
    } else if (options_.find_unused_parameters) {
      DDP_RETURN_IF_ERROR(ReduceUsedMap(&globally_used));
      if (options_.static_graph) {
        static_unused_ = iteration_.unused;
        static_globally_used_ = globally_used;
        static_recorded_ = true;
      }
    }
    WriteBackGradients(globally_used);
  }
  locally_used_.assign(params_.size(), false);
  NotifyIterationEnd();
  ++finished_iterations_;
  if (rebuild_ == Rebuild::kRecording) rebuild_ = Rebuild::kPending;
  return absl::OkStatus();
}

absl::Status Reducer::UnreadyParametersError() const {
  std::vector<std::string> names;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!iteration_.ready[i]) names.push_back(names_[i]);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "DDP: the backward pass gave no gradient to these parameters (rank ", group_->rank(),
      "): ", absl::StrJoin(names, ", "),
      ". Their buckets were never reduced, so this iteration's gradients are not averaged. If the model has "
      "parameters that do not take part in producing the loss, pass find_unused_parameters=true "
      "(--find_unused_parameters) to DistributedDataParallel."));
}

absl::Status Reducer::WaitForBuckets() {
  // CPU buckets: block until each reduction is done. Device buckets (NCCL): make the compute stream wait
  // on the communication stream instead; the host never blocks on communication, and the gradient
  // write-back that follows is ordered after the reductions on the device (Note [Reducer flow] step 5).
  const bool on_device = !params_.empty() && !params_.front().device().is_cpu();
  for (size_t b = 0; b < iteration_.next_bucket; ++b) {
    const std::shared_ptr<Work>& work = iteration_.works[b];
    if (work == nullptr) continue;
    absl::Status status = on_device ? work->WaitStream() : work->Wait(group_->timeout());
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("DDP bucket ", b, " of ", buckets_.size(), ": ", status.message()));
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
      param.set_grad(options_.gradient_as_bucket_view         ? view
                     : view.dtype() == DType::kFloat32 ? Clone(view)
                                                       : ToDType(view, DType::kFloat32));
    } else if (!SameRegion(grad, view)) {
      CopyInPlace(grad, view);  // widens a 16-bit average exactly
    }
  }
}

void Reducer::NotifyIterationEnd() {
  if (!observed()) return;
  const std::string hook = options_.comm_hook->name();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const std::shared_ptr<Work>& work = iteration_.works[b];
    if (work == nullptr) continue;
    const Bucket& bucket = buckets_[b];
    Notify(&ReducerObserver::OnBucketDone,
           BucketDoneEvent{static_cast<int>(b), bucket.buffer.nbytes(), bucket.params.size(), hook,
                           work->StartTime(), work->EndTime(), iteration_.bytes_sent[b]});
  }
  Notify(&ReducerObserver::OnIterationEnd,
         IterationEndEvent{finished_iterations_, static_cast<int>(buckets_.size()), iteration_.forward_start,
                           iteration_.backward_start, iteration_.backward_end});
}

}  // namespace ddp
