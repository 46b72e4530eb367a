// BatchNorm's pieces, for ops that normalise a batch spread over several processes: SyncBatchNorm2d
// (ddp/sync_batch_norm.h) computes its statistics, output and gradients with the code BatchNorm
// (tensor/ops.h) runs, and sums the per-channel partial sums over its process group in between
// (Note [BatchNorm pieces] in tensor/ops_batchnorm.cc has the math).
//
// x is a float32 tensor [n, c, *] (channel dim 1) on the CPU or one GPU; weight, bias and the running
// statistics are float32 [c] on x's device (any stride). Shapes are the caller's to check (BatchNorm
// checks its own). Results are new tensors on x's device. Thread safety: as tensor/ops.h.
#ifndef DDP_TENSOR_BATCH_NORM_H_
#define DDP_TENSOR_BATCH_NORM_H_

#include <cstdint>
#include <functional>

#include "tensor/tensor.h"

namespace ddp {

// Sums `partial` in place over everyone who normalises one batch together (SyncBatchNorm2d: a blocking
// all-reduce over its process group). `partial` is a contiguous float32 vector of per-channel partial
// sums on x's device; `stage` names the step for error messages ("statistics", "variance",
// "backward"). An empty function means x is the whole batch.
using ChannelSumFn = std::function<void(const Tensor& partial, const char* stage)>;

// The per-channel statistics x is normalised with.
struct BatchNormStats {
  Tensor mean;        // float32 [c], contiguous
  Tensor var;         // float32 [c], biased; undefined for running (eval) statistics
  Tensor invstd;      // float32 [c], 1 / sqrt(var + eps)
  int64_t count = 0;  // values per channel over the whole batch; 0 for running statistics
};

// The batch's statistics (training): mean = Σx / count, then var = Σ(x - mean)^2 / count, each sum
// accumulated in double and passed through `sum_over_group` (twice: the first time with the local
// count appended, so count covers the whole batch). Aborts unless count > 1. With a sum_over_group
// this is collective: every participant must call it.
BatchNormStats BatchNormBatchStats(const Tensor& x, float eps, const ChannelSumFn& sum_over_group = nullptr);

// The running statistics (eval): a copy of running_mean and 1 / sqrt(running_var + eps).
// REQUIRES: both defined.
BatchNormStats BatchNormRunningStats(const Tensor& running_mean, const Tensor& running_var, float eps);

// running = (1 - momentum) * running + momentum * batch, with the unbiased variance
// var * count / (count - 1), as PyTorch. Either running tensor may be undefined (skipped).
// REQUIRES: `batch` from BatchNormBatchStats.
void UpdateRunningStats(const Tensor& running_mean, const Tensor& running_var, const BatchNormStats& batch,
                        float momentum);

// y = (x - mean) * invstd * weight + bias per channel with `stats` (undefined weight / bias act as 1 / 0),
// recording the backward when x, weight or bias requires grad. With `training` (stats from
// BatchNormBatchStats over x) the input gradient flows through the statistics, and the backward passes
// its two per-channel sums through `sum_over_group` once (collective, whether or not x needs a
// gradient); otherwise the statistics are constants. The weight and bias gradients are always the
// local ones (x's share of the batch). `stats` is kept for the backward, not copied.
Tensor BatchNormNormalize(const Tensor& x, const Tensor& weight, const Tensor& bias, const BatchNormStats& stats,
                          bool training, const ChannelSumFn& sum_over_group = nullptr);

// relu(BatchNorm(x, weight, bias, running_mean, running_var, training, momentum, eps) + residual) as one
// op (undefined residual: nothing added), bit for bit what BatchNorm (tensor/ops.h), Add and Relu give one
// after another, forward and backward, with two passes over memory fewer in forward (Note [BatchNorm,
// Add and ReLU in one op] in tensor/ops_batchnorm.cc). Updates the running statistics as BatchNorm does
// when training. Dies naming the shapes when residual is defined and its shape is not x's, and as
// BatchNorm on bad shapes.
Tensor BatchNormAddRelu(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                        const Tensor& running_mean, const Tensor& running_var, bool training, float momentum,
                        float eps);

}  // namespace ddp

#endif  // DDP_TENSOR_BATCH_NORM_H_
