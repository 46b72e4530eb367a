// SyncBatchNorm2d: batch normalisation whose batch statistics are computed over the whole process
// group (torch.nn.SyncBatchNorm), so N ranks with batch b normalise exactly as one process with batch
// N * b. It lives above comm/ because it communicates.
#ifndef DDP_DDP_SYNC_BATCH_NORM_H_
#define DDP_DDP_SYNC_BATCH_NORM_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "comm/process_group.h"
#include "nn/layers.h"
#include "nn/module.h"

namespace ddp {

// Same parameters and buffers (and names) as BatchNorm2d. Training forward: BatchNorm's own statistics,
// normalisation and backward (tensor/batch_norm.h) with blocking all-reduces over `group` in between:
// two in the forward (per-channel sum and count, then sum of squared deviations), one in the backward
// (per-channel sums of dy and dy * (x - mean)). The weight and bias gradients stay local (DDP averages
// them). Eval: BatchNorm with the running statistics, no communication. Every rank must run forward
// and backward on it the same number of times (collective). `group` is not owned.
//
// A failed all-reduce (a peer gone or out of step, a timeout) cannot be returned from inside Forward or
// the backward pass, and must not abort the process: it is kept as status(), and from then on the layer
// communicates no more (its statistics are this rank's own, so the numbers are wrong). Callers check
// status() (or SyncBatchNormStatus over the whole model) after each forward and backward, and stop.
class SyncBatchNorm2d : public Module {
 public:
  // Takes over `bn`'s tensors (shared, not copied) and configuration.
  SyncBatchNorm2d(const nn::BatchNorm2d& bn, ProcessGroup* group);
  Tensor Forward(const Tensor& x) override;
  // OK, or the first failed all-reduce of this layer, naming the layer's stage ("SyncBatchNorm2d
  // statistics: ..."). Thread-safe (the backward may run on another thread).
  absl::Status status() const;
  // Replicas would all-reduce over the same group from several threads; not supported. Aborts.
  std::shared_ptr<Module> Replicate() const override;

 protected:
  std::string Describe() const override;

 private:
  Tensor TrainingForward(const Tensor& x);

  // The sticky status, shared with the backward closures (which may outlive a forward).
  struct Failure {
    mutable absl::Mutex mu;
    absl::Status status ABSL_GUARDED_BY(mu);
  };

  ProcessGroup* group_;
  std::shared_ptr<Failure> failure_ = std::make_shared<Failure>();
  int64_t num_features_;
  float eps_, momentum_;
};

// Replaces every BatchNorm2d in `module`'s tree by a SyncBatchNorm2d over `group` that shares its tensors
// (torch.nn.SyncBatchNorm.convert_sync_batchnorm). Returns how many were converted. `module` itself must
// not be a BatchNorm2d.
int ConvertSyncBatchNorm(Module& module, ProcessGroup* group);

// The first non-OK status() among the SyncBatchNorm2d layers of `module`'s tree (`module` included), in
// depth-first order; OK when there is none or none failed.
absl::Status SyncBatchNormStatus(const Module& module);

}  // namespace ddp

#endif  // DDP_DDP_SYNC_BATCH_NORM_H_
