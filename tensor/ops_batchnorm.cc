// BatchNorm as torch.nn.functional.batch_norm, over x [n, c, *] (channel dim 1), on either device, and
// the pieces it is made of (tensor/batch_norm.h), which SyncBatchNorm2d shares. The per-channel kernels
// (the only code that branches on the device) are in tensor/batch_norm_kernels.cc.
//
// Note [BatchNorm pieces]
// Both modes reduce to y = x * scale[c] + shift[c] with a per-channel mean and inverse standard
// deviation: the batch's (biased variance) when training, the running ones in eval. The batch statistics
// take two passes over x, each a per-channel sum (Σx, then Σ(x - mean)^2) that a synchronised batch norm
// sums over its process group before dividing by the global count. Backward, with N values per channel,
// s = Σg and t = Σ g (x - mean) per channel:
//   grad bias   = s
//   grad weight = t * invstd
//   grad x      = weight * invstd * (g - s / N - (x - mean) * invstd^2 * t / N)   (training: through
//                 the batch statistics, with s and t summed over the group like the statistics)
//   grad x      = weight * invstd * g                                            (eval: a fixed affine)
// Sums accumulate in double and are stored as float32 vectors (what an all-reduce sends).
#include <memory>
#include <string>
#include <vector>

#include "tensor/autocast.h"
#include "tensor/batch_norm.h"
#include "tensor/batch_norm_blocked.h"
#include "tensor/batch_norm_kernels.h"
#include "tensor/elementwise_kernels.h"
#include "tensor/function_node.h"
#include "tensor/functors.h"
#include "tensor/memory_format.h"
#include "tensor/op_device.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

void CheckChannelVector(const char* what, const Tensor& t, const Tensor& x) {
  if (!t.defined()) return;
  DDP_CHECK(t.dim() == 1 && t.shape()[0] == x.shape()[1])
      << "BatchNorm: " << what << " " << ShapeToString(t.shape()) << " does not match the channels of input "
      << ShapeToString(x.shape());
}

// The shapes BatchNorm and BatchNormAddRelu (`op`) take.
void CheckBatchNormShapes(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                          const Tensor& running_mean, const Tensor& running_var) {
  DDP_CHECK(x.dim() >= 2) << op << " expects [n, c] or [n, c, h, w], got " << ShapeToString(x.shape());
  CheckChannelVector("weight", weight, x);
  CheckChannelVector("bias", bias, x);
  CheckChannelVector("running_mean", running_mean, x);
  CheckChannelVector("running_var", running_var, x);
}

struct BatchNormGrads {
  Tensor gx, gw, gb;
  Tensor masked;  // the ReLU-masked output gradient, when BatchNormBackward was given a ReLU mask and asked
                  // for it
};

// Note [BatchNorm pieces]: the gradients asked for, from x (contiguous) and gy. With `relu_mask`, gy is
// first masked by ReLU's backward at the output that mask describes (x's shape; Note [BatchNorm, Add and
// ReLU in one op]) in the pass that sums it, and the masked gradient is returned too with `need_masked`.
BatchNormGrads BatchNormBackward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                                 const BatchNormStats& stats, bool training, bool need_x, bool need_w,
                                 bool need_b, const ChannelSumFn& sum_over_group,
                                 const ReluMaskBits* relu_mask = nullptr, bool need_masked = false,
                                 bool gradient_copy = false) {
  const int64_t c = stats.mean.numel();
  Tensor gyc = Contiguous(gy);
  Tensor sums = Tensor::Empty({2 * c}, DType::kFloat32, gy.device());  // {s, t}
  BatchNormGrads grads;
  // Note [BatchNorm in channel blocks]: without a group, the sums and the input gradient block by block.
  const bool blocked = training && !sum_over_group && need_x && x.device().is_cpu();
  if (blocked) {
    grads.masked = need_masked ? Tensor::Empty(x.shape(), DType::kFloat32) : Tensor();
    grads.gx = Tensor::Empty(x.shape(), DType::kFloat32);
    // Note [bf16 copies of BatchNorm's input gradient].
    const Tensor copy = gradient_copy ? Tensor::Empty(x.shape(), DType::kBFloat16) : Tensor();
    BlockedTrainingBackward(gyc, relu_mask, x, stats, weight, grads.masked, sums, grads.gx, copy);
    if (copy.defined()) AttachAutocastCopy(grads.gx, copy);
  } else if (relu_mask != nullptr) {
    Tensor masked = Tensor::Empty(x.shape(), DType::kFloat32, x.device());
    ReluMaskedBackwardSumsInto(gyc, *relu_mask, x, stats.mean, masked, sums);
    gyc = masked;
  } else {
    BackwardSumsInto(gyc, x, stats.mean, sums);
  }
  if (need_w) grads.gw = Mul(Narrow(sums, 0, c, c), stats.invstd);
  if (need_b) grads.gb = Clone(Narrow(sums, 0, 0, c));
  if (blocked) return grads;
  if (training && sum_over_group) sum_over_group(sums, "backward");
  if (need_x) grads.gx = InputGrad(gyc, x, stats.mean, stats.invstd, weight, sums, stats.count, training);
  if (relu_mask != nullptr) grads.masked = gyc;
  return grads;
}

}  // namespace

BatchNormStats BatchNormBatchStats(const Tensor& x, float eps, const ChannelSumFn& sum_over_group) {
  Tensor xc = Contiguous(x.Detach());
  const BatchNormShape shape = BatchNormShapeOf(xc);
  BatchNormStats stats;
  stats.count = shape.count();
  Tensor partial = Tensor::Empty({shape.c + 1}, DType::kFloat32, x.device());  // {Σx, count}
  Tensor sums = Narrow(partial, 0, 0, shape.c);
  ChannelSumsInto(xc, Tensor(), sums);
  if (sum_over_group) {
    Tensor count = Narrow(partial, 0, shape.c, 1);
    FillInPlace(count, static_cast<float>(stats.count));
    sum_over_group(partial, "statistics");
    stats.count = static_cast<int64_t>(count.item());
  }
  DDP_CHECK(stats.count > 1) << "BatchNorm: expected more than 1 value per channel when training, got input "
                             << ShapeToString(x.shape()) << (sum_over_group ? " and " : "")
                             << (sum_over_group ? std::to_string(stats.count) + " values over the group"
                                                : "");
  stats.mean = MulScalar(sums, static_cast<float>(1.0 / stats.count));
  Tensor squares = Tensor::Empty({shape.c}, DType::kFloat32, x.device());
  ChannelSumsInto(xc, stats.mean, squares);
  if (sum_over_group) sum_over_group(squares, "variance");
  stats.var = MulScalar(squares, static_cast<float>(1.0 / stats.count));
  stats.invstd = InverseStd(stats.var, eps);
  return stats;
}

BatchNormStats BatchNormRunningStats(const Tensor& running_mean, const Tensor& running_var, float eps) {
  DDP_CHECK(running_mean.defined() && running_var.defined())
      << "BatchNorm: eval mode needs running_mean and running_var";
  BatchNormStats stats;
  stats.mean = Clone(running_mean.Detach());
  stats.invstd = InverseStd(running_var, eps);
  return stats;
}

void UpdateRunningStats(const Tensor& running_mean, const Tensor& running_var, const BatchNormStats& batch,
                        float momentum) {
  UpdateRunning(running_mean, running_var, batch.mean, batch.var, batch.count, momentum);
}

namespace {

// Records BatchNorm's backward on `out`, the normalised xc (x contiguous and detached) with `stats`
// (BatchNormNormalize's contract); `gradient_copy` as BatchNormBackward takes it.
Tensor RecordBatchNorm(const Tensor& out, const Tensor& x, const Tensor& xc, const Tensor& weight,
                       const Tensor& bias, const BatchNormStats& stats, bool training,
                       const ChannelSumFn& sum_over_group, bool gradient_copy = false) {
  const bool need_x = x.requires_grad(), need_w = weight.defined() && weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  Tensor wd = weight.defined() ? weight.Detach() : Tensor();
  const char* name = sum_over_group ? "SyncBatchNormBackward" : "BatchNormBackward";
  return RecordOp(
      out, name, {&x, &weight, &bias},
      [xc, wd, stats, training, need_x, need_w, need_b, sum_over_group, gradient_copy](const Tensor& gy) {
        BatchNormGrads r = BatchNormBackward(gy, xc, wd, stats, training, need_x, need_w, need_b,
                                             sum_over_group, nullptr, false, gradient_copy);
        return std::vector<Tensor>{r.gx, r.gw, r.gb};
      });
}

}  // namespace

Tensor BatchNormNormalize(const Tensor& x, const Tensor& weight, const Tensor& bias,
                          const BatchNormStats& stats, bool training, const ChannelSumFn& sum_over_group) {
  Tensor xc = Contiguous(x.Detach());
  return RecordBatchNorm(Normalize(xc, stats.mean, stats.invstd, weight, bias), x, xc, weight, bias, stats,
                         training, sum_over_group);
}

namespace {

// BatchNorm of x in its dense layout (NCHW, or the [n*h*w, c] rows of a channels-last activation);
// `gradient_copy` as BatchNormBackward takes it.
Tensor DenseBatchNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                      const Tensor& running_var, bool training, float momentum, float eps,
                      bool gradient_copy) {
  const Tensor xc = Contiguous(x);  // one copy, if any, shared by the statistics and the output
  if (!training) {
    return BatchNormNormalize(xc, weight, bias, BatchNormRunningStats(running_mean, running_var, eps), false);
  }
  if (xc.device().is_cpu()) {
    // Note [BatchNorm in channel blocks]: the statistics and the output block by block.
    const Tensor xd = xc.Detach();
    BlockedForward forward = BlockedTrainingForward(xd, eps, weight, bias, /*relu=*/false);
    UpdateRunningStats(running_mean, running_var, forward.stats, momentum);
    return RecordBatchNorm(forward.y, xc, xd, weight, bias, forward.stats, true, nullptr, gradient_copy);
  }
  const BatchNormStats stats = BatchNormBatchStats(xc, eps);
  UpdateRunningStats(running_mean, running_var, stats, momentum);
  return BatchNormNormalize(xc, weight, bias, stats, true);
}

}  // namespace

Tensor BatchNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                 const Tensor& running_var, bool training, float momentum, float eps) {
  RequireFloatOnOneDevice("BatchNorm", {&x, &weight, &bias, &running_mean, &running_var});
  CheckBatchNormShapes("BatchNorm", x, weight, bias, running_mean, running_var);
  if (x.device().is_cpu() && HasChannelsLastStrides(x)) {
    // Note [Channels-last activations]: normalised as its [n*h*w, c] rows, and returned channels-last;
    // under bf16 autocast its input gradient with its bf16 copy (Note [bf16 copies of BatchNorm's input
    // gradient]).
    return ChannelsLastFromRows(DenseBatchNorm(RowsOf(x), weight, bias, running_mean, running_var, training,
                                               momentum, eps, AutocastWantsCopyOf(x)),
                                x.shape());
  }
  return DenseBatchNorm(x, weight, bias, running_mean, running_var, training, momentum, eps, false);
}

// Note [BatchNorm, Add and ReLU in one op]
// A ResNet block ends in relu(bn(x) + identity) and starts in relu(bn(x)). Run as three ops, the
// normalised tensor and the sum are each written out and read back once more in forward. The fused op
// computes the statistics as BatchNorm, then one pass writes relu(x * scale + shift + residual)
// (NormalizeAddRelu, the same roundings as the three ops: bit for bit their output). Backward is the
// three ops' backward in their order: the ReLU mask applied to the output gradient (which is also the
// residual's gradient), then BatchNorm's backward of that, so the gradients are bit for bit theirs too;
// the masked gradient is formed in the pass that takes BatchNorm's backward sums over it
// (ReluMaskedBackwardSumsInto, or the blocked backward of Note [BatchNorm in channel blocks], which writes
// it out only when the residual takes it as its gradient and otherwise masks gy again from the bits for
// the input gradient). The op keeps the output's ReLU mask for
// backward, one bit an element, not the output (Note [ReLU mask bits], tensor/batch_norm_rows.h).
// The fused kernel is the CPU's; on a GPU the op runs the three ops.
namespace {

// BatchNormAddRelu on the CPU of x in its dense layout (NCHW, or the [n*h*w, c] rows of a channels-last
// activation); `gradient_copy` as BatchNormBackward takes it.
Tensor DenseBatchNormAddRelu(const Tensor& x, const Tensor& residual, const Tensor& weight,
                             const Tensor& bias, const Tensor& running_mean, const Tensor& running_var,
                             bool training, float momentum, float eps, bool gradient_copy) {
  const Tensor xc = Contiguous(x.Detach());
  const Tensor rc = residual.defined() ? Contiguous(residual.Detach()) : Tensor();
  // Note [Autocast copies from the producer]: the bf16 copy the next convolution takes, in the same pass.
  const Tensor copy = AutocastWantsCopyOf(x) ? Tensor::Empty(x.shape(), DType::kBFloat16) : Tensor();
  auto relu_mask = std::make_shared<ReluMaskBits>();
  BatchNormStats stats;
  Tensor out;
  if (training) {
    // Note [BatchNorm in channel blocks]: the statistics and the output block by block.
    BlockedForward forward =
        BlockedTrainingForward(xc, eps, weight, bias, /*relu=*/true, rc, copy, relu_mask.get());
    stats = forward.stats;
    out = forward.y;
    UpdateRunningStats(running_mean, running_var, stats, momentum);
  } else {
    stats = BatchNormRunningStats(running_mean, running_var, eps);
    out = NormalizeAddRelu(xc, stats.mean, stats.invstd, weight, bias, rc, copy, relu_mask.get());
  }
  const bool need_x = x.requires_grad(), need_r = residual.defined() && residual.requires_grad();
  const bool need_w = weight.defined() && weight.requires_grad(),
             need_b = bias.defined() && bias.requires_grad();
  Tensor wd = weight.defined() ? weight.Detach() : Tensor();
  if (copy.defined()) AttachAutocastCopy(out, copy);
  return RecordOp(
      out, "BatchNormAddReluBackward", {&x, &residual, &weight, &bias},
      [xc, wd, relu_mask, stats, training, need_x, need_r, need_w, need_b, gradient_copy](const Tensor& gy) {
        BatchNormGrads r = BatchNormBackward(gy, xc, wd, stats, training, need_x, need_w, need_b, nullptr,
                                             relu_mask.get(), need_r, gradient_copy);
        return std::vector<Tensor>{r.gx, need_r ? r.masked : Tensor(), r.gw, r.gb};
      });
}

}  // namespace

Tensor BatchNormAddRelu(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                        const Tensor& running_mean, const Tensor& running_var, bool training, float momentum,
                        float eps) {
  RequireFloatOnOneDevice("BatchNormAddRelu", {&x, &residual, &weight, &bias, &running_mean, &running_var});
  CheckBatchNormShapes("BatchNormAddRelu", x, weight, bias, running_mean, running_var);
  DDP_CHECK(!residual.defined() || residual.shape() == x.shape())
      << "BatchNormAddRelu: residual " << ShapeToString(residual.shape()) << " does not match input "
      << ShapeToString(x.shape());
  if (!x.device().is_cpu()) {
    const Tensor normalized = BatchNorm(x, weight, bias, running_mean, running_var, training, momentum, eps);
    return Relu(residual.defined() ? Add(normalized, residual) : normalized);
  }
  if (HasChannelsLastStrides(x)) {
    // Note [Channels-last activations]: normalised as its [n*h*w, c] rows (the residual's rows added),
    // and returned channels-last with its bf16 copy; under bf16 autocast its input gradient with its bf16
    // copy too (Note [bf16 copies of BatchNorm's input gradient]).
    const Tensor rows_residual = residual.defined() ? RowsOf(ContiguousChannelsLast(residual)) : Tensor();
    return ChannelsLastFromRows(
        DenseBatchNormAddRelu(RowsOf(x), rows_residual, weight, bias, running_mean, running_var, training,
                              momentum, eps, AutocastWantsCopyOf(x)),
        x.shape());
  }
  return DenseBatchNormAddRelu(x, residual, weight, bias, running_mean, running_var, training, momentum, eps,
                               false);
}

}  // namespace ddp
