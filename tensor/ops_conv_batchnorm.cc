// Convolution, BatchNorm, Add and ReLU as one op under bf16 autocast (contracts and Note [Convolution and
// BatchNorm in one op under bf16]: tensor/conv_batch_norm.h).
#include <memory>
#include <vector>

#include "tensor/autocast.h"
#include "tensor/batch_norm.h"
#include "tensor/batch_norm_channels_last.h"
#include "tensor/batch_norm_kernels.h"
#include "tensor/conv_batch_norm.h"
#include "tensor/conv_channels_last.h"
#include "tensor/conv_kernels.h"
#include "tensor/function_node.h"
#include "tensor/memory_format.h"
#include "tensor/op_device.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

// What the fused forward keeps for backward.
struct Saved {
  Tensor x_low, w_low;  // the convolution's bf16 operands (NHWC input, [out, c, kh, kw] weight)
  Tensor z;             // the convolution's float32 output, NHWC
  std::shared_ptr<ReluMaskBits> mask;  // the ReLU mask, a byte per output element
  BatchNormStats stats;
  Tensor bn_weight;  // detached, or undefined
};

void CheckChannels(const char* what, const Tensor& t, int64_t channels) {
  DDP_CHECK(!t.defined() || (t.dim() == 1 && t.size(0) == channels))
      << "ConvBatchNormAddRelu: BatchNorm " << what << " " << ShapeToString(t.shape())
      << " does not match the convolution's " << channels << " output channels";
}

// The backward of the fused op from the output gradient gy: {gx, conv weight, residual, bn weight, bn bias}.
std::vector<Tensor> FusedBackward(const Tensor& gy, const Saved& s, const cpu::ConvGeometry& g, bool need_x,
                                  bool need_conv_w, bool need_r, bool need_w, bool need_b) {
  const int64_t rows = g.n * g.P(), c = g.out;
  const Tensor gyc = ContiguousChannelsLast(gy.Detach());
  const Tensor masked = need_r ? EmptyChannelsLast(gy.shape(), DType::kFloat32) : Tensor();
  const Tensor gz = Tensor::Empty({rows * c}, DType::kBFloat16);
  const Tensor sums = Tensor::Empty({2 * c}, DType::kFloat32);
  batch_norm_channels_last::BackwardArrays arrays{gyc.data<float>(),
                                                  s.mask->bits.data(),
                                                  s.z.data<float>(),
                                                  s.stats.mean.data<float>(),
                                                  s.stats.invstd.data<float>(),
                                                  masked.defined() ? masked.data<float>() : nullptr,
                                                  sums.data<float>(),
                                                  sums.data<float>() + c,
                                                  nullptr};
  arrays.gx_copy = gz.data<BFloat16>();
  batch_norm_channels_last::TrainingBackward(rows, c, s.bn_weight, arrays);
  cpu::ConvGradTensors grads = cpu::NewConvGrads(s.x_low, s.w_low, g, false, need_conv_w, false, gy.device());
  if (need_x) grads.gx = EmptyChannelsLast(s.x_low.shape(), DType::kFloat32);
  cpu::ConvBackwardChannelsLast(s.x_low.data<BFloat16>(), s.w_low.data<BFloat16>(), nullptr,
                                gz.data<BFloat16>(), g, grads.Pointers());
  const Tensor gw = need_w ? Mul(Narrow(sums, 0, c, c), s.stats.invstd) : Tensor();
  const Tensor gb = need_b ? Clone(Narrow(sums, 0, 0, c)) : Tensor();
  return {grads.gx, grads.gw, masked, gw, gb};
}

Tensor Fused(const Tensor& x, const Tensor& conv_weight, int64_t stride, int64_t padding,
             const Tensor& residual, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
             const Tensor& running_var, float momentum, float eps) {
  const cpu::ConvGeometry g = cpu::CheckConvShapes(x, conv_weight, Tensor(), stride, padding);
  for (const auto& [what, t] : {std::pair<const char*, const Tensor*>{"weight", &weight},
                                {"bias", &bias},
                                {"running_mean", &running_mean},
                                {"running_var", &running_var}}) {
    CheckChannels(what, *t, g.out);
  }
  const Shape out_shape{g.n, g.out, g.oh, g.ow};
  DDP_CHECK(!residual.defined() || residual.shape() == out_shape)
      << "ConvBatchNormAddRelu: residual " << ShapeToString(residual.shape()) << " does not match the output "
      << ShapeToString(out_shape);
  const int64_t rows = g.n * g.P(), c = g.out;
  DDP_CHECK(rows > 1) << "ConvBatchNormAddRelu: expected more than 1 value per channel when training, got "
                      << "output " << ShapeToString(out_shape);
  Saved s;
  s.x_low = AutocastCastChannelsLast(x);
  s.w_low = AutocastCast(conv_weight);
  s.z = EmptyChannelsLast(out_shape, DType::kFloat32);
  cpu::ConvForwardChannelsLast(s.x_low.data<BFloat16>(), s.w_low.data<BFloat16>(), nullptr, g,
                               s.z.data<float>());
  s.stats.count = rows;
  s.stats.mean = Tensor::Empty({c}, DType::kFloat32);
  s.stats.var = Tensor::Empty({c}, DType::kFloat32);
  s.stats.invstd = Tensor::Empty({c}, DType::kFloat32);
  s.mask = std::make_shared<ReluMaskBits>();
  uint8_t* const mask = SizeReluMask(s.mask.get(), BatchNormShape{rows, c, 1});
  s.bn_weight = weight.defined() ? weight.Detach() : Tensor();
  const Tensor rc = residual.defined() ? ContiguousChannelsLast(residual.Detach()) : Tensor();
  const Tensor y = EmptyChannelsLast(out_shape, DType::kFloat32);
  const Tensor copy = EmptyChannelsLast(out_shape, DType::kBFloat16);
  batch_norm_channels_last::ForwardArrays arrays{s.z.data<float>(),
                                                 rc.defined() ? rc.data<float>() : nullptr,
                                                 s.stats.mean.data<float>(),
                                                 s.stats.var.data<float>(),
                                                 s.stats.invstd.data<float>(),
                                                 y.data<float>(),
                                                 copy.data<BFloat16>(),
                                                 mask};
  batch_norm_channels_last::TrainingForward(rows, c, eps, weight, bias, /*relu=*/true, arrays);
  UpdateRunningStats(running_mean, running_var, s.stats, momentum);
  // Note [Autocast copies from the producer]: the next convolution takes the copy.
  AttachAutocastCopy(y, copy);
  const bool need_x = x.requires_grad(), need_conv_w = conv_weight.requires_grad();
  const bool need_r = residual.defined() && residual.requires_grad();
  const bool need_w = weight.defined() && weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  return RecordOp(y, "ConvBatchNormAddReluBackward", {&x, &conv_weight, &residual, &weight, &bias},
                  [s, g, need_x, need_conv_w, need_r, need_w, need_b](const Tensor& gy) {
                    return FusedBackward(gy, s, g, need_x, need_conv_w, need_r, need_w, need_b);
                  });
}

}  // namespace

bool ConvBatchNormFuses(const Tensor& x, bool training) {
  return training && x.device().is_cpu() && x.dim() == 4 && HasChannelsLastStrides(x) && AutocastAppliesTo(x);
}

Tensor ConvBatchNormAddRelu(const Tensor& x, const Tensor& conv_weight, int64_t stride, int64_t padding,
                            const Tensor& residual, const Tensor& weight, const Tensor& bias,
                            const Tensor& running_mean, const Tensor& running_var, bool training,
                            float momentum, float eps) {
  RequireFloatOnOneDevice("ConvBatchNormAddRelu",
                          {&x, &conv_weight, &residual, &weight, &bias, &running_mean, &running_var});
  if (!ConvBatchNormFuses(x, training)) {
    return BatchNormAddRelu(Conv2d(x, conv_weight, Tensor(), stride, padding), residual, weight, bias,
                            running_mean, running_var, training, momentum, eps);
  }
  return Fused(x, conv_weight, stride, padding, residual, weight, bias, running_mean, running_var, momentum,
               eps);
}

}  // namespace ddp
