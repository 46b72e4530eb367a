#include "ddp/sync_batch_norm.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"
#include "tensor/function_node.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

// Blocking all-reduce (sum) of a small float vector; aborts naming the layer if it fails, since an
// error cannot be returned from inside forward/backward.
void AllReduceOrDie(ProcessGroup& group, const Tensor& t, const char* what) {
  absl::Status status = group.AllReduce(t, ReduceOp::kSum)->Wait(group.timeout());
  DDP_CHECK(status.ok()) << "SyncBatchNorm2d " << what << ": " << status.message();
}

// Per-channel view helpers over a contiguous [n, c, inner] float buffer.
struct Layout {
  int64_t n, c, inner;
  explicit Layout(const Tensor& x) : n(x.shape()[0]), c(x.shape()[1]), inner(x.numel() / std::max<int64_t>(x.shape()[0] * x.shape()[1], 1)) {}
  template <typename F>
  void ForChannel(int64_t ch, F f) const {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t base = (i * c + ch) * inner;
      for (int64_t k = 0; k < inner; ++k) f(base + k);
    }
  }
};

}  // namespace

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

Tensor SyncBatchNorm2d::TrainingForward(const Tensor& x) {
  Tensor xc = Contiguous(x.Detach());
  const Layout layout(xc);
  const int64_t c = layout.c;
  const float* px = xc.data<float>();
  // 1) global per-channel sum and count -> mean.
  Tensor sums = Tensor::Empty({c + 1});
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0;
    layout.ForChannel(ch, [&](int64_t i) { s += px[i]; });
    sums.data<float>()[ch] = static_cast<float>(s);
  }
  sums.data<float>()[c] = static_cast<float>(layout.n * layout.inner);
  AllReduceOrDie(*group_, sums, "statistics");
  const double count = sums.data<float>()[c];
  DDP_CHECK(count > 1) << "SyncBatchNorm2d needs more than one value per channel over the group";
  // 2) global per-channel sum of squared deviations -> biased variance.
  std::vector<double> mean(c);
  Tensor squares = Tensor::Empty({c});
  for (int64_t ch = 0; ch < c; ++ch) {
    mean[ch] = sums.data<float>()[ch] / count;
    double s = 0;
    layout.ForChannel(ch, [&](int64_t i) { s += (px[i] - mean[ch]) * (px[i] - mean[ch]); });
    squares.data<float>()[ch] = static_cast<float>(s);
  }
  AllReduceOrDie(*group_, squares, "variance");
  Tensor weight = GetParameter("weight"), bias = GetParameter("bias");
  Tensor running_mean = GetBuffer("running_mean"), running_var = GetBuffer("running_var");
  Tensor out = Tensor::Empty(xc.shape());
  Tensor x_hat = Tensor::Empty(xc.shape());
  std::vector<float> invstd(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    const double var = squares.data<float>()[ch] / count;
    invstd[ch] = static_cast<float>(1.0 / std::sqrt(var + eps_));
    const float w = weight.data<float>()[ch], b = bias.data<float>()[ch], m = static_cast<float>(mean[ch]);
    layout.ForChannel(ch, [&](int64_t i) {
      x_hat.data<float>()[i] = (px[i] - m) * invstd[ch];
      out.data<float>()[i] = x_hat.data<float>()[i] * w + b;
    });
    running_mean.data<float>()[ch] = (1 - momentum_) * running_mean.data<float>()[ch] + momentum_ * m;
    running_var.data<float>()[ch] =
        (1 - momentum_) * running_var.data<float>()[ch] + momentum_ * static_cast<float>(var * count / (count - 1));
  }
  GetBuffer("num_batches_tracked").data<int64_t>()[0] += 1;
  ProcessGroup* group = group_;
  Tensor wd = weight.Detach();
  return RecordOp(out, "SyncBatchNormBackward", {&x, &weight, &bias},
                  [group, x_hat, wd, invstd, count, c](const Tensor& grad) {
    Tensor g = Contiguous(grad);
    const Layout layout(g);
    const float* pg = g.data<float>();
    const float* ph = x_hat.data<float>();
    // Local per-channel sums, then their global sums.
    Tensor local = Tensor::Empty({2 * c});
    for (int64_t ch = 0; ch < c; ++ch) {
      double sum_dy = 0, sum_dy_xhat = 0;
      layout.ForChannel(ch, [&](int64_t i) {
        sum_dy += pg[i];
        sum_dy_xhat += static_cast<double>(pg[i]) * ph[i];
      });
      local.data<float>()[ch] = static_cast<float>(sum_dy);
      local.data<float>()[c + ch] = static_cast<float>(sum_dy_xhat);
    }
    Tensor grad_weight = Tensor::Empty({c}), grad_bias = Tensor::Empty({c});
    for (int64_t ch = 0; ch < c; ++ch) {  // parameter gradients are local; DDP averages them
      grad_bias.data<float>()[ch] = local.data<float>()[ch];
      grad_weight.data<float>()[ch] = local.data<float>()[c + ch];
    }
    Tensor global = Clone(local);
    AllReduceOrDie(*group, global, "backward");
    Tensor dx = Tensor::Empty(g.shape());
    for (int64_t ch = 0; ch < c; ++ch) {
      const float mean_dy = static_cast<float>(global.data<float>()[ch] / count);
      const float mean_dy_xhat = static_cast<float>(global.data<float>()[c + ch] / count);
      const float scale = wd.data<float>()[ch] * invstd[ch];
      layout.ForChannel(ch, [&](int64_t i) { dx.data<float>()[i] = scale * (pg[i] - mean_dy - ph[i] * mean_dy_xhat); });
    }
    return std::vector<Tensor>{dx, grad_weight, grad_bias};
  });
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
