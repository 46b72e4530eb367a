// CUDA Conv2d kernels (im2col + cuBLAS), dropout and losses (contracts: tensor/ops.h and cuda_ops.h;
// algorithms mirror the CPU files named in each section).
#include <algorithm>

#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/op_util.h"
#include "tensor/function_node.h"
#include "tensor/ops.h"

namespace ddp {
namespace cuda {

// ---- Conv2d's kernels (Note [Conv2d image groups] in tensor/conv_kernels.h, with a GPU-sized group) ----

namespace {

// Images per GEMM: as many as keep col [K, G*P] within 256 MiB (one wide GEMM per group).
int64_t ImagesPerGroup(const kernels::ConvShape& g) {
  const int64_t per_image = std::max<int64_t>(g.c * g.kh * g.kw * g.oh * g.ow, 1);
  const int64_t budget = (int64_t{256} << 20) / static_cast<int64_t>(sizeof(float));
  return std::max<int64_t>(1, std::min<int64_t>(g.n, budget / per_image));
}

}  // namespace

void Conv2dForward(const Tensor& x, const Tensor& w, const Tensor& b, const kernels::ConvShape& g, const Tensor& y) {
  const int device = x.device().index;
  const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, group = ImagesPerGroup(g);
  DeviceGuard guard(device);
  cudaStream_t stream = StreamOf(x);
  Tensor col = Tensor::Empty({K * P * std::min(group, g.n)}, DType::kFloat32, x.device());
  Tensor tmp = Tensor::Empty({g.out * P * std::min(group, g.n)}, DType::kFloat32, x.device());
  for (int64_t first = 0; first < g.n; first += group) {
    const int64_t count = std::min(group, g.n - first), ld = count * P;
    DDP_CUDA_CHECK(kernels::Im2Col(x.data<float>(), g, first, count, col.data<float>(), stream));
    Gemm(device, false, false, g.out, ld, K, 1.0f, w.data<float>(), K, col.data<float>(), ld, 0.0f,
         tmp.data<float>(), ld);
    DDP_CUDA_CHECK(kernels::SwapOuterDims(tmp.data<float>(), y.data<float>() + first * g.out * P, g.out, count, P,
                                          b.defined() ? b.data<float>() : nullptr, stream));
  }
}

void Conv2dBackward(const Tensor& x, const Tensor& w, const Tensor& gy, const kernels::ConvShape& g,
                    const Tensor& gx, const Tensor& gw, const Tensor& gb) {
  if (gb.defined()) ddp::CopyInPlace(gb, ddp::Sum(gy.Detach(), {0, 2, 3}, false));
  if (!gx.defined() && !gw.defined()) return;
  const int device = gy.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = StreamOf(gy);
  const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, group = ImagesPerGroup(g);
  const int64_t max_cols = P * std::max<int64_t>(std::min(group, g.n), 1);
  Tensor col = Tensor::Empty({K * max_cols}, DType::kFloat32, gy.device());
  Tensor gathered = Tensor::Empty({g.out * max_cols}, DType::kFloat32, gy.device());
  if (gw.defined()) ddp::FillInPlace(gw, 0.0f);
  for (int64_t first = 0; first < g.n; first += group) {
    const int64_t count = std::min(group, g.n - first), ld = count * P;
    // gy [count, out, P] -> [out, count * P]
    DDP_CUDA_CHECK(kernels::SwapOuterDims(gy.data<float>() + first * g.out * P, gathered.data<float>(), count, g.out,
                                          P, nullptr, stream));
    if (gw.defined()) {
      DDP_CUDA_CHECK(kernels::Im2Col(x.data<float>(), g, first, count, col.data<float>(), stream));
      Gemm(device, false, true, g.out, K, ld, 1.0f, gathered.data<float>(), ld, col.data<float>(), ld, 1.0f,
           gw.data<float>(), K);
    }
    if (gx.defined()) {
      Gemm(device, true, false, K, ld, g.out, 1.0f, w.data<float>(), K, gathered.data<float>(), ld, 0.0f,
           col.data<float>(), ld);
      DDP_CUDA_CHECK(kernels::Col2Im(col.data<float>(), g, first, count, gx.data<float>(), stream));
    }
  }
}

// ---- Dropout (tensor/ops_dropout.cc; mask from a counter-based hash, see cuda_ops.h) ----

Tensor Dropout(const Tensor& x, float p, bool training, Generator& generator) {
  RequireCudaFloat("Dropout", {&x});
  DDP_CHECK(p >= 0.0f && p <= 1.0f) << "Dropout: probability " << p << " is outside [0, 1]";
  if (!training || p == 0.0f) return x;
  Tensor mask = Tensor::Empty(x.shape(), DType::kFloat32, x.device());
  {
    DeviceGuard guard(x.device().index);
    const float scale = p == 1.0f ? 0.0f : 1.0f / (1.0f - p);
    DDP_CUDA_CHECK(kernels::DropoutMask(mask.data<float>(), mask.numel(), p, scale, generator.Next(), StreamOf(x)));
  }
  Tensor out = BinaryMap(x, mask, x.shape(), functors::Mul());
  return RecordOp(out, "DropoutBackward", {&x}, [mask](const Tensor& g) {
    return std::vector<Tensor>{BinaryMap(g, mask, mask.shape(), functors::Mul())};
  });
}

// ---- losses (tensor/ops_loss.cc) ----

namespace {

// The targets on log_probs' device, checked on the host when they came from the host.
Tensor TargetsOnDevice(const Tensor& target, const Tensor& log_probs, int64_t rows, int64_t classes) {
  DDP_CHECK(target.dtype() == DType::kInt64 && target.dim() == 1 && target.shape()[0] == rows)
      << "loss target must be int64 [" << rows << "], got " << DTypeName(target.dtype()) << " "
      << ShapeToString(target.shape());
  if (target.device() == log_probs.device()) return ContiguousNoGrad(target);
  DDP_CHECK(target.device().is_cpu()) << "loss target on " << target.device().ToString() << ", logits on "
                                      << log_probs.device().ToString();
  Tensor host = ddp::Contiguous(target);
  const int64_t* t = host.data<int64_t>();
  for (int64_t i = 0; i < rows; ++i) {
    DDP_CHECK(t[i] >= 0 && t[i] < classes)
        << "target " << t[i] << " at index " << i << " is out of range [0, " << classes << ")";
  }
  return ddp::ToDevice(host, log_probs.device());
}

Tensor LogSoftmaxNoGrad(const Tensor& x, int64_t rows, int64_t cols) {
  Tensor c = ContiguousNoGrad(x);
  Tensor out = Tensor::Empty(x.shape(), DType::kFloat32, x.device());
  DeviceGuard guard(x.device().index);
  DDP_CUDA_CHECK(kernels::LogSoftmax(c.data<float>(), out.data<float>(), rows, cols, StreamOf(x)));
  return out;
}

}  // namespace

Tensor LogSoftmax(const Tensor& x, int64_t dim) {
  RequireCudaFloat("LogSoftmax", {&x});
  if (dim < 0) dim += x.dim();
  DDP_CHECK(dim == x.dim() - 1) << "LogSoftmax supports the last dimension only, got dim " << dim;
  const int64_t cols = x.shape()[dim], rows = cols == 0 ? 0 : x.numel() / cols;
  Tensor out = LogSoftmaxNoGrad(x, rows, cols);
  Tensor saved = out.Detach();
  return RecordOp(out, "LogSoftmaxBackward", {&x}, [saved, rows, cols](const Tensor& g) {
    Tensor gc = ContiguousNoGrad(g);
    Tensor dx = Tensor::Empty(saved.shape(), DType::kFloat32, g.device());
    DeviceGuard guard(g.device().index);
    DDP_CUDA_CHECK(
        kernels::LogSoftmaxBackward(gc.data<float>(), saved.data<float>(), dx.data<float>(), rows, cols, StreamOf(g)));
    return std::vector<Tensor>{dx};
  });
}

Tensor NllLoss(const Tensor& log_probs, const Tensor& target) {
  RequireCudaFloat("NllLoss", {&log_probs});
  DDP_CHECK(log_probs.dim() == 2) << "NllLoss expects [n, classes], got " << ShapeToString(log_probs.shape());
  const int64_t rows = log_probs.shape()[0], classes = log_probs.shape()[1];
  Tensor t = TargetsOnDevice(target, log_probs, rows, classes);
  Tensor c = ContiguousNoGrad(log_probs);
  Tensor out = Tensor::Empty({}, DType::kFloat32, log_probs.device());
  {
    DeviceGuard guard(log_probs.device().index);
    DDP_CUDA_CHECK(kernels::NllLoss(c.data<float>(), t.data<int64_t>(), rows, classes, out.data<float>(),
                                    StreamOf(log_probs)));
  }
  return RecordOp(out, "NllLossBackward", {&log_probs}, [t, rows, classes](const Tensor& g) {
    Tensor dx = Tensor::Empty({rows, classes}, DType::kFloat32, g.device());
    Tensor gc = ContiguousNoGrad(g);
    DeviceGuard guard(g.device().index);
    DDP_CUDA_CHECK(
        kernels::NllLossBackward(gc.data<float>(), t.data<int64_t>(), dx.data<float>(), rows, classes, StreamOf(g)));
    return std::vector<Tensor>{dx};
  });
}

Tensor CrossEntropy(const Tensor& logits, const Tensor& target) {
  RequireCudaFloat("CrossEntropy", {&logits});
  DDP_CHECK(logits.dim() == 2) << "CrossEntropy expects [n, classes], got " << ShapeToString(logits.shape());
  const int64_t rows = logits.shape()[0], classes = logits.shape()[1];
  Tensor t = TargetsOnDevice(target, logits, rows, classes);
  Tensor log_probs = LogSoftmaxNoGrad(logits, rows, classes);
  Tensor out = Tensor::Empty({}, DType::kFloat32, logits.device());
  {
    DeviceGuard guard(logits.device().index);
    DDP_CUDA_CHECK(kernels::NllLoss(log_probs.data<float>(), t.data<int64_t>(), rows, classes, out.data<float>(),
                                    StreamOf(logits)));
  }
  return RecordOp(out, "CrossEntropyBackward", {&logits}, [log_probs, t, rows, classes](const Tensor& g) {
    Tensor dx = Tensor::Empty({rows, classes}, DType::kFloat32, g.device());
    Tensor gc = ContiguousNoGrad(g);
    DeviceGuard guard(g.device().index);
    DDP_CUDA_CHECK(kernels::CrossEntropyBackward(log_probs.data<float>(), t.data<int64_t>(), gc.data<float>(),
                                                 dx.data<float>(), rows, classes, StreamOf(g)));
    return std::vector<Tensor>{dx};
  });
}

}  // namespace cuda
}  // namespace ddp
