#include "ddp/sync_batch_norm.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tensor/batch_norm.h"
#include "tensor/op_device.h"
#include "tensor/ops.h"

namespace ddp {

SyncBatchNorm2d::SyncBatchNorm2d(const nn::BatchNorm2d& bn, ProcessGroup* group)
    : Module("SyncBatchNorm"), group_(group), num_features_(bn.num_features()), eps_(bn.eps()),
      momentum_(bn.momentum()) {
  RegisterParameter("weight", bn.weight());
  RegisterParameter("bias", bn.bias());
  RegisterBuffer("running_mean", bn.running_mean());
  RegisterBuffer("running_var", bn.running_var());
  RegisterBuffer("num_batches_tracked", bn.num_batches_tracked());
  Train(bn.is_training());
}

std::string SyncBatchNorm2d::Describe() const {
  return absl::StrFormat("SyncBatchNorm(%d, eps=%g, momentum=%g, world_size=%d)", num_features_, eps_, momentum_,
                         group_->size());
}

std::shared_ptr<Module> SyncBatchNorm2d::Replicate() const {
  DDP_CHECK(false) << "SyncBatchNorm2d cannot be replicated (it communicates over its process group)";
  return nullptr;
}

Tensor SyncBatchNorm2d::Forward(const Tensor& x) {
  DDP_CHECK(x.dim() == 4 && x.shape()[1] == num_features_)
      << "SyncBatchNorm2d(" << num_features_ << "): input " << ShapeToString(x.shape());
  if (!is_training()) {
    return BatchNorm(x, GetParameter("weight"), GetParameter("bias"), GetBuffer("running_mean"),
                     GetBuffer("running_var"), /*training=*/false, momentum_, eps_);
  }
  return TrainingForward(x);
}

// BatchNorm's own pieces (tensor/batch_norm.h) with an all-reduce over the group wherever they sum over
// the batch: two in the statistics, one in the backward.
Tensor SyncBatchNorm2d::TrainingForward(const Tensor& x) {
  Tensor weight = GetParameter("weight"), bias = GetParameter("bias");
  Tensor running_mean = GetBuffer("running_mean"), running_var = GetBuffer("running_var");
  RequireFloatOnOneDevice("SyncBatchNorm2d", {&x, &weight, &bias, &running_mean, &running_var});
  const Tensor xc = Contiguous(x);  // one copy, if any, shared by the statistics and the output
  // Blocking all-reduce (sum) of a small vector. After a failure, nothing: the ranks are out of step, and
  // another collective would only wait for the timeout again (see the class comment).
  const ChannelSumFn all_reduce = [group = group_, failure = failure_](const Tensor& partial,
                                                                       const char* stage) {
    absl::MutexLock lock(&failure->mu);
    if (!failure->status.ok()) return;
    const absl::Status status = group->AllReduce(partial, ReduceOp::kSum)->Wait(group->timeout());
    if (!status.ok()) {
      failure->status =
          absl::Status(status.code(), absl::StrCat("SyncBatchNorm2d ", stage, ": ", status.message()));
    }
  };
  const BatchNormStats stats = BatchNormBatchStats(xc, eps_, all_reduce);
  UpdateRunningStats(running_mean, running_var, stats, momentum_);
  nn::IncrementBatchCount(GetBuffer("num_batches_tracked"));  // on the device the module lives on
  return BatchNormNormalize(xc, weight, bias, stats, /*training=*/true, all_reduce);
}

absl::Status SyncBatchNorm2d::status() const {
  absl::MutexLock lock(&failure_->mu);
  return failure_->status;
}

absl::Status SyncBatchNormStatus(const Module& module) {
  if (const auto* sync = dynamic_cast<const SyncBatchNorm2d*>(&module)) {
    if (absl::Status status = sync->status(); !status.ok()) return status;
  }
  for (const auto& [name, child] : module.NamedChildren()) {
    if (absl::Status status = SyncBatchNormStatus(*child); !status.ok()) return status;
  }
  return absl::OkStatus();
}

int ConvertSyncBatchNorm(Module& module, ProcessGroup* group) {
  int converted = 0;
  for (const auto& [name, child] : module.NamedChildren()) {
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(child.get())) {
      module.ReplaceChild(name, std::make_shared<SyncBatchNorm2d>(*bn, group));
      ++converted;
    } else {
      converted += ConvertSyncBatchNorm(*child, group);
    }
  }
  return converted;
}

}  // namespace ddp
