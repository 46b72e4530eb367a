// LogSoftmax, NllLoss and the fused CrossEntropy.
#include <algorithm>
#include <cmath>

#include "tensor/device_guard.h"
#include "tensor/function_node.h"
#include "tensor/ops.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_ops.h"
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

void CheckTargets(const Tensor& target, int64_t rows, int64_t classes) {
  DDP_CHECK(target.dtype() == DType::kInt64 && target.dim() == 1 && target.shape()[0] == rows)
      << "loss target must be int64 [" << rows << "], got " << DTypeName(target.dtype()) << " "
      << ShapeToString(target.shape());
  const int64_t* t = target.data<int64_t>();
  for (int64_t i = 0; i < rows; ++i) {
    DDP_CHECK(t[i] >= 0 && t[i] < classes)
        << "target " << t[i] << " at index " << i << " is out of range [0, " << classes << ")";
  }
}

}  // namespace

Tensor LogSoftmax(const Tensor& x, int64_t dim) {
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) return cuda::LogSoftmax(x, dim);
#endif
  RequireCpuFloat("LogSoftmax", {&x});
  if (dim < 0) dim += x.dim();
  DDP_CHECK(dim == x.dim() - 1) << "LogSoftmax supports the last dimension only, got dim " << dim;
  Tensor c = Contiguous(x.Detach());
  const int64_t cols = x.shape()[dim], rows = cols == 0 ? 0 : x.numel() / cols;
  Tensor out = Tensor::Empty(x.shape(), DType::kFloat32, x.device());
  LogSoftmaxRows(c.data<float>(), out.data<float>(), rows, cols);
  Tensor saved = out.Detach();
  return RecordOp(out, "LogSoftmaxBackward", {&x}, [saved, rows, cols](const Tensor& g) {
    // dx = g - softmax * sum(g) per row
    Tensor gc = Contiguous(g);
    Tensor dx = Tensor::Empty(saved.shape(), DType::kFloat32, g.device());
    const float* pg = gc.data<float>();
    const float* py = saved.data<float>();
    float* pd = dx.data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      double total = 0.0;
      for (int64_t c = 0; c < cols; ++c) total += pg[r * cols + c];
      for (int64_t c = 0; c < cols; ++c)
        pd[r * cols + c] = pg[r * cols + c] - std::exp(py[r * cols + c]) * static_cast<float>(total);
    }
    return std::vector<Tensor>{dx};
  });
}

Tensor NllLoss(const Tensor& log_probs, const Tensor& target) {
#ifdef DDP_WITH_CUDA
  if (log_probs.device().is_cuda()) return cuda::NllLoss(log_probs, target);
#endif
  RequireCpuFloat("NllLoss", {&log_probs});
  DDP_CHECK(log_probs.dim() == 2) << "NllLoss expects [n, classes], got " << ShapeToString(log_probs.shape());
  const int64_t rows = log_probs.shape()[0], classes = log_probs.shape()[1];
  CheckTargets(target, rows, classes);
  Tensor c = Contiguous(log_probs.Detach());
  const int64_t* t = target.data<int64_t>();
  double total = 0.0;
  for (int64_t i = 0; i < rows; ++i) total -= c.data<float>()[i * classes + t[i]];
  Tensor out = Tensor::Empty({}, DType::kFloat32, log_probs.device());
  *out.data<float>() = rows == 0 ? NAN : static_cast<float>(total / rows);
  Tensor td = target;
  return RecordOp(out, "NllLossBackward", {&log_probs}, [td, rows, classes](const Tensor& g) {
    Tensor dx = Tensor::Empty({rows, classes}, DType::kFloat32, g.device());
    FillInPlace(dx, 0.0f);
    const float scale = -static_cast<float>(g.item()) / static_cast<float>(rows);
    const int64_t* t = td.data<int64_t>();
    for (int64_t i = 0; i < rows; ++i) dx.data<float>()[i * classes + t[i]] = scale;
    return std::vector<Tensor>{dx};
  });
}

Tensor CrossEntropy(const Tensor& logits, const Tensor& target) {
#ifdef DDP_WITH_CUDA
  if (logits.device().is_cuda()) return cuda::CrossEntropy(logits, target);
#endif
  RequireCpuFloat("CrossEntropy", {&logits});
  DDP_CHECK(logits.dim() == 2) << "CrossEntropy expects [n, classes], got " << ShapeToString(logits.shape());
  const int64_t rows = logits.shape()[0], classes = logits.shape()[1];
  CheckTargets(target, rows, classes);
  Tensor c = Contiguous(logits.Detach());
  Tensor log_probs = Tensor::Empty(logits.shape(), DType::kFloat32, logits.device());
  LogSoftmaxRows(c.data<float>(), log_probs.data<float>(), rows, classes);
  const int64_t* t = target.data<int64_t>();
  double total = 0.0;
  for (int64_t i = 0; i < rows; ++i) total -= log_probs.data<float>()[i * classes + t[i]];
  Tensor out = Tensor::Empty({}, DType::kFloat32, logits.device());
  *out.data<float>() = rows == 0 ? NAN : static_cast<float>(total / rows);
  Tensor td = target;
  return RecordOp(out, "CrossEntropyBackward", {&logits}, [log_probs, td, rows, classes](const Tensor& g) {
    // d/dlogits = (softmax - onehot) * g / rows
    Tensor dx = Tensor::Empty({rows, classes}, DType::kFloat32, g.device());
    const float scale = static_cast<float>(g.item()) / static_cast<float>(rows);
    const float* lp = log_probs.data<float>();
    float* pd = dx.data<float>();
    const int64_t* t = td.data<int64_t>();
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t c = 0; c < classes; ++c) pd[i * classes + c] = std::exp(lp[i * classes + c]) * scale;
      pd[i * classes + t[i]] -= scale;
    }
    return std::vector<Tensor>{dx};
  });
}

}  // namespace ddp
