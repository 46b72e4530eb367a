// BatchNorm as torch.nn.functional.batch_norm, over x [n, c, *] (channel dim 1).
//
// Both modes reduce to y = x * scale[c] + shift[c] with a per-channel mean and inverse standard
// deviation: the batch's (biased variance) when training, the running ones in eval. Statistics and the
// backward's channel sums are accumulated in double. Backward, with N = n * prod(spatial), s = Σg and
// t = Σ g (x - mean) per channel:
//   grad bias   = s
//   grad weight = t * invstd
//   grad x      = weight * invstd * (g - s / N - (x - mean) * invstd^2 * t / N)   (training: through
//                 the batch statistics)
//   grad x      = weight * invstd * g                                            (eval: a fixed affine)
#include <cmath>
#include <memory>
#include <vector>

#include "tensor/device_guard.h"
#include "tensor/function_node.h"
#include "tensor/ops.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_ops.h"
#endif

namespace ddp {
namespace {

struct BnGeometry {
  int64_t n, c, inner;  // x viewed as [n, c, inner]
  int64_t count() const { return n * inner; }
};

// Per-channel statistics the backward needs (mean and inverse std actually used to normalise).
struct BnStats {
  std::vector<double> mean, invstd;
};

// Element i (0 <= i < c) of a 1-D tensor of any stride, or `fallback` when the tensor is undefined.
float At(const Tensor& t, int64_t i, float fallback) {
  return t.defined() ? t.data<float>()[i * t.strides()[0]] : fallback;
}

void CheckChannelVector(const char* what, const Tensor& t, const Tensor& x) {
  if (!t.defined()) return;
  DDP_CHECK(t.dim() == 1 && t.shape()[0] == x.shape()[1])
      << "BatchNorm: " << what << " " << ShapeToString(t.shape()) << " does not match the channels of input "
      << ShapeToString(x.shape());
}

// Batch mean and biased variance per channel (two passes in double).
void BatchStatistics(const float* x, const BnGeometry& g, std::vector<double>& mean, std::vector<double>& var) {
  mean.assign(g.c, 0.0);
  var.assign(g.c, 0.0);
#pragma omp parallel for if (g.n * g.c * g.inner > (1 << 16))
  for (int64_t ch = 0; ch < g.c; ++ch) {
    double total = 0.0;
    for (int64_t i = 0; i < g.n; ++i) {
      const float* p = x + (i * g.c + ch) * g.inner;
#pragma omp simd reduction(+ : total)
      for (int64_t j = 0; j < g.inner; ++j) total += p[j];
    }
    const double m = total / static_cast<double>(g.count());
    double squares = 0.0;
    for (int64_t i = 0; i < g.n; ++i) {
      const float* p = x + (i * g.c + ch) * g.inner;
#pragma omp simd reduction(+ : squares)
      for (int64_t j = 0; j < g.inner; ++j) {
        const double d = p[j] - m;
        squares += d * d;
      }
    }
    mean[ch] = m;
    var[ch] = squares / static_cast<double>(g.count());
  }
}

// running = (1 - momentum) * running + momentum * batch, with the unbiased variance (as PyTorch).
void UpdateRunningStats(const Tensor& running_mean, const Tensor& running_var, const std::vector<double>& mean,
                        const std::vector<double>& var, int64_t count, float momentum) {
  const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
  for (size_t ch = 0; ch < mean.size(); ++ch) {
    if (running_mean.defined()) {
      float& r = running_mean.data<float>()[ch * running_mean.strides()[0]];
      r = static_cast<float>((1.0 - momentum) * r + momentum * mean[ch]);
    }
    if (running_var.defined()) {
      float& r = running_var.data<float>()[ch * running_var.strides()[0]];
      r = static_cast<float>((1.0 - momentum) * r + momentum * var[ch] * unbias);
    }
  }
}

// y = x * scale + shift per channel.
void Normalise(const float* x, const BnGeometry& g, const BnStats& stats, const Tensor& weight,
               const Tensor& bias, float* y) {
  std::vector<float> scale(g.c), shift(g.c);
  for (int64_t ch = 0; ch < g.c; ++ch) {
    const double s = stats.invstd[ch] * At(weight, ch, 1.0f);
    scale[ch] = static_cast<float>(s);
    shift[ch] = static_cast<float>(At(bias, ch, 0.0f) - stats.mean[ch] * s);
  }
#pragma omp parallel for collapse(2) if (g.n * g.c * g.inner > (1 << 16))
  for (int64_t i = 0; i < g.n; ++i) {
    for (int64_t ch = 0; ch < g.c; ++ch) {
      const int64_t base = (i * g.c + ch) * g.inner;
      const float a = scale[ch], b = shift[ch];
      for (int64_t j = 0; j < g.inner; ++j) y[base + j] = x[base + j] * a + b;
    }
  }
}

struct BnGrads {
  Tensor gx, gw, gb;
};

BnGrads BatchNormBackward(const Tensor& gy, const Tensor& xc, const Tensor& weight, const BnGeometry& g,
                          const BnStats& stats, bool training, bool need_x, bool need_w, bool need_b) {
  Tensor gyc = Contiguous(gy);
  const float* pg = gyc.data<float>();
  const float* px = xc.data<float>();
  std::vector<double> sum_g(g.c, 0.0), sum_gx(g.c, 0.0);
#pragma omp parallel for if (g.n * g.c * g.inner > (1 << 16))
  for (int64_t ch = 0; ch < g.c; ++ch) {
    double s = 0.0, t = 0.0;
    const double m = stats.mean[ch];
    for (int64_t i = 0; i < g.n; ++i) {
      const int64_t base = (i * g.c + ch) * g.inner;
#pragma omp simd reduction(+ : s, t)
      for (int64_t j = 0; j < g.inner; ++j) {
        s += pg[base + j];
        t += pg[base + j] * (px[base + j] - m);
      }
    }
    sum_g[ch] = s;
    sum_gx[ch] = t;
  }
  BnGrads grads;
  if (need_w) {
    grads.gw = Tensor::Empty({g.c}, DType::kFloat32, gy.device());
    for (int64_t ch = 0; ch < g.c; ++ch) grads.gw.data<float>()[ch] = static_cast<float>(sum_gx[ch] * stats.invstd[ch]);
  }
  if (need_b) {
    grads.gb = Tensor::Empty({g.c}, DType::kFloat32, gy.device());
    for (int64_t ch = 0; ch < g.c; ++ch) grads.gb.data<float>()[ch] = static_cast<float>(sum_g[ch]);
  }
  if (!need_x) return grads;
  // gx = k * g + a * (x - mean) + b per channel (training); k * g (eval).
  std::vector<float> k(g.c), a(g.c, 0.0f), b(g.c, 0.0f), m(g.c);
  const double count = static_cast<double>(g.count());
  for (int64_t ch = 0; ch < g.c; ++ch) {
    const double invstd = stats.invstd[ch], kk = At(weight, ch, 1.0f) * invstd;
    k[ch] = static_cast<float>(kk);
    m[ch] = static_cast<float>(stats.mean[ch]);
    if (training) {
      const double aa = -kk * invstd * invstd * sum_gx[ch] / count;
      a[ch] = static_cast<float>(aa);
      b[ch] = static_cast<float>(-kk * sum_g[ch] / count);
    }
  }
  grads.gx = Tensor::Empty(xc.shape(), DType::kFloat32, gy.device());
  float* out = grads.gx.data<float>();
#pragma omp parallel for collapse(2) if (g.n * g.c * g.inner > (1 << 16))
  for (int64_t i = 0; i < g.n; ++i) {
    for (int64_t ch = 0; ch < g.c; ++ch) {
      const int64_t base = (i * g.c + ch) * g.inner;
      const float kc = k[ch], ac = a[ch], bc = b[ch], mc = m[ch];
      for (int64_t j = 0; j < g.inner; ++j) out[base + j] = kc * pg[base + j] + ac * (px[base + j] - mc) + bc;
    }
  }
  return grads;
}

}  // namespace

Tensor BatchNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                 const Tensor& running_var, bool training, float momentum, float eps) {
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) return cuda::BatchNorm(x, weight, bias, running_mean, running_var, training, momentum, eps);
#endif
  RequireCpuFloat("BatchNorm", {&x, &weight, &bias, &running_mean, &running_var});
  DDP_CHECK(x.dim() >= 2) << "BatchNorm expects [n, c] or [n, c, h, w], got " << ShapeToString(x.shape());
  CheckChannelVector("weight", weight, x);
  CheckChannelVector("bias", bias, x);
  CheckChannelVector("running_mean", running_mean, x);
  CheckChannelVector("running_var", running_var, x);
  const int64_t n = x.shape()[0], c = x.shape()[1];
  const BnGeometry g{n, c, c == 0 || n == 0 ? 0 : x.numel() / (n * c)};
  Tensor xc = Contiguous(x.Detach());
  auto stats = std::make_shared<BnStats>();
  if (training) {
    DDP_CHECK(g.count() > 1) << "BatchNorm: expected more than 1 value per channel when training, got input "
                             << ShapeToString(x.shape());
    std::vector<double> var;
    BatchStatistics(xc.data<float>(), g, stats->mean, var);
    stats->invstd.resize(c);
    for (int64_t ch = 0; ch < c; ++ch) stats->invstd[ch] = 1.0 / std::sqrt(var[ch] + eps);
    UpdateRunningStats(running_mean, running_var, stats->mean, var, g.count(), momentum);
  } else {
    DDP_CHECK(running_mean.defined() && running_var.defined())
        << "BatchNorm: eval mode needs running_mean and running_var";
    stats->mean.resize(c);
    stats->invstd.resize(c);
    for (int64_t ch = 0; ch < c; ++ch) {
      stats->mean[ch] = At(running_mean, ch, 0.0f);
      stats->invstd[ch] = 1.0 / std::sqrt(static_cast<double>(At(running_var, ch, 1.0f)) + eps);
    }
  }
  Tensor out = Tensor::Empty(x.shape(), DType::kFloat32, x.device());
  Normalise(xc.data<float>(), g, *stats, weight, bias, out.data<float>());
  const bool need_x = x.requires_grad(), need_w = weight.defined() && weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  Tensor wd = weight.defined() ? weight.Detach() : Tensor();
  return RecordOp(out, "BatchNormBackward", {&x, &weight, &bias},
                  [xc, wd, g, stats, training, need_x, need_w, need_b](const Tensor& gy) {
                    BnGrads r = BatchNormBackward(gy, xc, wd, g, *stats, training, need_x, need_w, need_b);
                    return std::vector<Tensor>{r.gx, r.gw, r.gb};
                  });
}

}  // namespace ddp
