// LogSoftmax, NllLoss and the fused CrossEntropy, once for both devices: checks, saved tensors and autograd
// wiring are shared, and each kernel call branches on the device (the CPU's row loops here, the GPU's
// kernels in tensor/cuda/reduce_loss.cu).
#include <algorithm>
#include <cmath>

#include "tensor/function_node.h"
#include "tensor/functors.h"
#include "tensor/op_device.h"
#include "tensor/ops.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/op_util.h"
#endif

namespace ddp {
namespace {

// Row-wise log-softmax of a contiguous [rows, cols] buffer.
void LogSoftmaxRows(const float* in, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * cols;
    float* y = out + r * cols;
    float max_value = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) max_value = std::max(max_value, x[c]);
    double total = 0.0;
    for (int64_t c = 0; c < cols; ++c) total += std::exp(static_cast<double>(x[c] - max_value));
    const float log_total = static_cast<float>(std::log(total)) + max_value;
    for (int64_t c = 0; c < cols; ++c) y[c] = x[c] - log_total;
  }
}

// y = log_softmax(x) row by row for contiguous x, y [rows, cols], on x's device.
void LogSoftmaxInto(const Tensor& x, const Tensor& y, int64_t rows, int64_t cols) {
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) {
    cuda::DeviceGuard guard(x.device().index);
    DDP_CUDA_CHECK(
        cuda::kernels::LogSoftmax(x.data<float>(), y.data<float>(), rows, cols, cuda::StreamOf(x)));
    return;
  }
#endif
  LogSoftmaxRows(x.data<float>(), y.data<float>(), rows, cols);
}

// LogSoftmax's backward dx = g - exp(y) * sum(g) per row, for contiguous g, y, dx [rows, cols], on g's
// device.
void LogSoftmaxBackwardInto(const Tensor& g, const Tensor& y, const Tensor& dx, int64_t rows, int64_t cols) {
  const float* pg = g.data<float>();
  const float* py = y.data<float>();
  float* pd = dx.data<float>();
#ifdef DDP_WITH_CUDA
  if (g.device().is_cuda()) {
    cuda::DeviceGuard guard(g.device().index);
    DDP_CUDA_CHECK(cuda::kernels::LogSoftmaxBackward(pg, py, pd, rows, cols, cuda::StreamOf(g)));
    return;
  }
#endif
  for (int64_t r = 0; r < rows; ++r) {
    double total = 0.0;
    for (int64_t c = 0; c < cols; ++c) total += pg[r * cols + c];
    const functors::LogSoftmaxBackward grad{static_cast<float>(total)};
    for (int64_t c = 0; c < cols; ++c) pd[r * cols + c] = grad(pg[r * cols + c], py[r * cols + c]);
  }
}

// *out = mean over i of -lp[i, t[i]] (NaN when rows == 0) for contiguous lp [rows, classes] and targets t
// [rows], on lp's device.
void NllLossInto(const Tensor& lp, const Tensor& t, int64_t rows, int64_t classes, const Tensor& out) {
#ifdef DDP_WITH_CUDA
  if (lp.device().is_cuda()) {
    cuda::DeviceGuard guard(lp.device().index);
    DDP_CUDA_CHECK(cuda::kernels::NllLoss(lp.data<float>(), t.data<int64_t>(), rows, classes,
                                          out.data<float>(), cuda::StreamOf(lp)));
    return;
  }
#endif
  const float* p = lp.data<float>();
  const int64_t* pt = t.data<int64_t>();
  double total = 0.0;
  for (int64_t i = 0; i < rows; ++i) total -= p[i * classes + pt[i]];
  *out.data<float>() = rows == 0 ? NAN : static_cast<float>(total / rows);
}

// NllLoss's backward from the scalar gradient g: dx [rows, classes] = 0 except dx[i, t[i]] = -g / rows, on
// g's device.
void NllLossBackwardInto(const Tensor& g, const Tensor& t, const Tensor& dx, int64_t rows, int64_t classes) {
#ifdef DDP_WITH_CUDA
  if (g.device().is_cuda()) {
    cuda::DeviceGuard guard(g.device().index);
    DDP_CUDA_CHECK(cuda::kernels::NllLossBackward(g.data<float>(), t.data<int64_t>(), dx.data<float>(), rows,
                                                  classes, cuda::StreamOf(g)));
    return;
  }
#endif
  FillInPlace(dx, 0.0f);
  const float scale = -static_cast<float>(g.item()) / static_cast<float>(rows);
  const int64_t* pt = t.data<int64_t>();
  float* pd = dx.data<float>();
  for (int64_t i = 0; i < rows; ++i) pd[i * classes + pt[i]] = scale;
}

// CrossEntropy's backward from the scalar gradient g: dx = (exp(lp) - onehot(t)) * g / rows for contiguous
// lp, dx [rows, classes], on g's device.
void CrossEntropyBackwardInto(const Tensor& lp, const Tensor& t, const Tensor& g, const Tensor& dx,
                              int64_t rows, int64_t classes) {
  const float* pl = lp.data<float>();
  const int64_t* pt = t.data<int64_t>();
  float* pd = dx.data<float>();
#ifdef DDP_WITH_CUDA
  if (g.device().is_cuda()) {
    cuda::DeviceGuard guard(g.device().index);
    DDP_CUDA_CHECK(
        cuda::kernels::CrossEntropyBackward(pl, pt, g.data<float>(), pd, rows, classes, cuda::StreamOf(g)));
    return;
  }
#endif
  const functors::CrossEntropyBackward grad{static_cast<float>(g.item()) / static_cast<float>(rows)};
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < classes; ++c) pd[i * classes + c] = grad(pl[i * classes + c], c == pt[i]);
  }
}

// The targets as the loss kernels read them: contiguous int64 [rows] on the device of `scores` (the logits or
// log-probabilities). Labels from the host are range-checked there, naming the first bad one; labels already
// on a GPU are not, since reading them would synchronise every step (tensor/cuda/cuda_ops.h).
Tensor CheckedTargets(const Tensor& target, const Tensor& scores, int64_t rows, int64_t classes) {
  DDP_CHECK(target.dtype() == DType::kInt64 && target.dim() == 1 && target.shape()[0] == rows)
      << "loss target must be int64 [" << rows << "], got " << DTypeName(target.dtype()) << " "
      << ShapeToString(target.shape());
  DDP_CHECK(target.device() == scores.device() || target.device().is_cpu())
      << "loss target on " << target.device().ToString() << ", logits on " << scores.device().ToString();
  Tensor t = Contiguous(target);
  if (!t.device().is_cpu()) return t;
  const int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < rows; ++i) {
    DDP_CHECK(p[i] >= 0 && p[i] < classes)
        << "target " << p[i] << " at index " << i << " is out of range [0, " << classes << ")";
  }
  return ToDevice(t, scores.device());
}

}  // namespace

Tensor LogSoftmax(const Tensor& x, int64_t dim) {
  RequireFloatOnOneDevice("LogSoftmax", {&x});
  if (dim < 0) dim += x.dim();
  DDP_CHECK(dim == x.dim() - 1) << "LogSoftmax supports the last dimension only, got dim " << dim;
  Tensor c = Contiguous(x.Detach());
  const int64_t cols = x.shape()[dim], rows = cols == 0 ? 0 : x.numel() / cols;
  Tensor out = Tensor::Empty(x.shape(), DType::kFloat32, x.device());
  LogSoftmaxInto(c, out, rows, cols);
  Tensor saved = out.Detach();
  return RecordOp(out, "LogSoftmaxBackward", {&x}, [saved, rows, cols](const Tensor& g) {
    Tensor dx = Tensor::Empty(saved.shape(), DType::kFloat32, g.device());
    LogSoftmaxBackwardInto(Contiguous(g), saved, dx, rows, cols);
    return std::vector<Tensor>{dx};
  });
}

Tensor NllLoss(const Tensor& log_probs, const Tensor& target) {
  RequireFloatOnOneDevice("NllLoss", {&log_probs});
  DDP_CHECK(log_probs.dim() == 2) << "NllLoss expects [n, classes], got " << ShapeToString(log_probs.shape());
  const int64_t rows = log_probs.shape()[0], classes = log_probs.shape()[1];
  Tensor t = CheckedTargets(target, log_probs, rows, classes);
  Tensor out = Tensor::Empty({}, DType::kFloat32, log_probs.device());
  NllLossInto(Contiguous(log_probs.Detach()), t, rows, classes, out);
  return RecordOp(out, "NllLossBackward", {&log_probs}, [t, rows, classes](const Tensor& g) {
    Tensor dx = Tensor::Empty({rows, classes}, DType::kFloat32, g.device());
    NllLossBackwardInto(g, t, dx, rows, classes);
    return std::vector<Tensor>{dx};
  });
}

Tensor CrossEntropy(const Tensor& logits, const Tensor& target) {
  RequireFloatOnOneDevice("CrossEntropy", {&logits});
  DDP_CHECK(logits.dim() == 2) << "CrossEntropy expects [n, classes], got " << ShapeToString(logits.shape());
  const int64_t rows = logits.shape()[0], classes = logits.shape()[1];
  Tensor t = CheckedTargets(target, logits, rows, classes);
  Tensor log_probs = Tensor::Empty(logits.shape(), DType::kFloat32, logits.device());
  LogSoftmaxInto(Contiguous(logits.Detach()), log_probs, rows, classes);
  Tensor out = Tensor::Empty({}, DType::kFloat32, logits.device());
  NllLossInto(log_probs, t, rows, classes, out);
  return RecordOp(out, "CrossEntropyBackward", {&logits}, [log_probs, t, rows, classes](const Tensor& g) {
    // d/dlogits = (softmax - onehot) * g / rows
    Tensor dx = Tensor::Empty({rows, classes}, DType::kFloat32, g.device());
    CrossEntropyBackwardInto(log_probs, t, g, dx, rows, classes);
    return std::vector<Tensor>{dx};
  });
}

}  // namespace ddp
