// Matmul and Linear on either device: GEMM through cpu::Gemm (oneDNN) or cuda::Gemm (cuBLAS), passing
// transposed views without copies; under autocast, 16-bit GEMMs (Note [Autocast], Note [Autocast on CUDA]). Everything but the GEMM call, the bias broadcast and the bias
// gradient is shared by both devices.
#include "tensor/autocast.h"
#include "tensor/cpu_gemm.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/function_node.h"
#include "tensor/functors.h"
#include "tensor/op_device.h"
#include "tensor/ops.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/context.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/op_util.h"
#endif

namespace ddp {
namespace {

// A 2-D operand as GEMM sees it: pointer, whether it is stored transposed, and its row stride.
struct GemmOperand {
  const float* data;
  bool transposed;
  int64_t ld;
  Tensor keep_alive;  // the contiguous copy when one was needed
};

GemmOperand AsGemmOperand(const Tensor& x) {
  const auto& s = x.strides();
  if (s[1] == 1 && s[0] >= std::max<int64_t>(x.shape()[1], 1)) return {x.data<float>(), false, s[0], x};
  if (s[0] == 1 && s[1] >= std::max<int64_t>(x.shape()[0], 1)) return {x.data<float>(), true, s[1], x};
  Tensor c = Clone(x.Detach());
  return {c.data<float>(), false, std::max<int64_t>(x.shape()[1], 1), c};
}

// out[m, n] = a[m, k] b[k, n] (+ beta * out), on out's device.
void MatmulInto(const Tensor& a, const Tensor& b, const Tensor& out, float beta) {
  GemmOperand ga = AsGemmOperand(a), gb = AsGemmOperand(b);
  const int64_t m = a.shape()[0], n = b.shape()[1], k = a.shape()[1];
#ifdef DDP_WITH_CUDA
  if (out.device().is_cuda()) {
    if (k == 0) {  // cuBLAS rejects k = 0
      if (beta == 0.0f) FillInPlace(out, 0.0f);
      return;
    }
    cuda::Gemm(out.device().index, ga.transposed, gb.transposed, m, n, k, 1.0f, ga.data, ga.ld, gb.data, gb.ld, beta,
               out.data<float>(), std::max<int64_t>(n, 1));
    return;
  }
#endif
  cpu::Gemm(ga.transposed, gb.transposed, m, n, k, 1.0f, ga.data, ga.ld, gb.data, gb.ld, beta, out.data<float>(), n);
}

// Every row of out[n, features] = b.
void FillRowsWithBias(const Tensor& out, const Tensor& b) {
#ifdef DDP_WITH_CUDA
  if (out.device().is_cuda()) {
    cuda::BinaryInPlace(out, b.Detach(), functors::Assign());
    return;
  }
#endif
  const int64_t n = out.shape()[0], features = out.shape()[1];
  const float* pb = Contiguous(b.Detach()).data<float>();
  float* po = out.data<float>();
  for (int64_t i = 0; i < n; ++i) std::copy(pb, pb + features, po + i * features);
}

// The bias gradient: g[rows, cols] summed over rows.
Tensor SumRows(const Tensor& g) {
#ifdef DDP_WITH_CUDA
  if (g.device().is_cuda()) return Sum(g.Detach(), {0}, false);
#endif
  const int64_t rows = g.shape()[0], cols = g.shape()[1];
  Tensor sum = Tensor::Empty({cols}, DType::kFloat32, g.device());
  float* o = sum.data<float>();
  Tensor gc = Contiguous(g);
  const float* p = gc.data<float>();
  std::fill(o, o + cols, 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) o[j] += p[i * cols + j];
  return sum;
}

Tensor MatmulNoGrad(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::Empty({a.shape()[0], b.shape()[1]}, DType::kFloat32, a.device());
  MatmulInto(a, b, out, 0.0f);
  return out;
}

// out [m, n] float32 = a [m, k] x b [k, n] (+ beta * out) with 16-bit a and b (bf16 on the CPU; bf16 or
// fp16 on CUDA, Note [Autocast on CUDA]) stored contiguously, transposed where asked.
void LowPrecisionGemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float beta, const Tensor& out) {
  const int64_t m = a.shape()[trans_a ? 1 : 0], k = a.shape()[trans_a ? 0 : 1];
  const int64_t n = b.shape()[trans_b ? 0 : 1];
#ifdef DDP_WITH_CUDA
  if (a.device().is_cuda()) {
    cuda::GemmLowPrecision(a.device().index, a.dtype(), trans_a, trans_b, m, n, k, 1.0f, a.raw_data(), a.shape()[1],
                           b.raw_data(), b.shape()[1], beta, out.data<float>(), std::max<int64_t>(n, 1));
    return;
  }
#endif
  cpu::Gemm(trans_a, trans_b, m, n, k, 1.0f, a.data<BFloat16>(), a.shape()[1], b.data<BFloat16>(), b.shape()[1],
            beta, out.data<float>(), n);
}

// The same product into a new tensor.
Tensor LowPrecisionProduct(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b) {
  Tensor out = Tensor::Empty({a.shape()[trans_a ? 1 : 0], b.shape()[trans_b ? 0 : 1]}, DType::kFloat32, a.device());
  LowPrecisionGemm(a, trans_a, b, trans_b, 0.0f, out);
  return out;
}

// Matmul under autocast (Note [Autocast]; Note [Autocast on CUDA]).
Tensor MatmulLowPrecision(const Tensor& a, const Tensor& b) {
  Tensor ab = AutocastCast(a), bb = AutocastCast(b);
  Tensor out = LowPrecisionProduct(ab, false, bb, false);
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  return RecordOp(out, "MatmulBackward", {&a, &b}, [ab, bb, need_a, need_b](const Tensor& g) {
    const Tensor g16 = ToLowPrecisionContiguous(g, ab.dtype());
    return std::vector<Tensor>{need_a ? LowPrecisionProduct(g16, false, bb, true) : Tensor(),
                               need_b ? LowPrecisionProduct(ab, true, g16, false) : Tensor()};
  });
}

// Linear under autocast (Note [Autocast]; Note [Autocast on CUDA]): y = x w^T + b with 16-bit x and w,
// float32 bias and output.
Tensor LinearLowPrecision(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor xb = AutocastCast(x), wb = AutocastCast(w);
  const int64_t n = x.shape()[0], out_features = w.shape()[0];
  Tensor out = Tensor::Empty({n, out_features}, DType::kFloat32, x.device());
  float beta = 0.0f;
  if (b.defined()) {
    FillRowsWithBias(out, b);
    beta = 1.0f;
  }
  LowPrecisionGemm(xb, false, wb, true, beta, out);
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const bool need_b = b.defined() && b.requires_grad();
  return RecordOp(out, "LinearBackward", {&x, &w, &b}, [xb, wb, need_x, need_w, need_b](const Tensor& g) {
    const bool fp16 = xb.dtype() == DType::kFloat16;
    const Tensor g16 = need_x || need_w || (need_b && fp16) ? ToLowPrecisionContiguous(g, xb.dtype()) : Tensor();
    Tensor gx = need_x ? LowPrecisionProduct(g16, false, wb, false) : Tensor();
    Tensor gw = need_w ? LowPrecisionProduct(g16, true, xb, false) : Tensor();
    // fp16 sums the rounded output gradient, as the CPU's fp16 path (Note [Autocast on CUDA]).
    Tensor gb = need_b ? SumRows(fp16 ? ToDType(g16, DType::kFloat32) : g) : Tensor();
    return std::vector<Tensor>{gx, gw, gb};
  });
}

}  // namespace

Tensor Matmul(const Tensor& a, const Tensor& b) {
  RequireFloatOnOneDevice("Matmul", {&a, &b});
  DDP_CHECK(a.dim() == 2 && b.dim() == 2 && a.shape()[1] == b.shape()[0])
      << "Matmul: " << ShapeToString(a.shape()) << " x " << ShapeToString(b.shape());
  if (AutocastAppliesTo(a) || AutocastCudaAppliesTo(a)) return MatmulLowPrecision(a, b);
  if (AutocastFp16AppliesTo(a)) {  // Note [fp16 autocast]
    return AutocastFp16Call({a, b}, [](const std::vector<Tensor>& r) { return Matmul(r[0], r[1]); });
  }
  Tensor out = MatmulNoGrad(a, b);
  Tensor ad = a.Detach(), bd = b.Detach();
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  return RecordOp(out, "MatmulBackward", {&a, &b}, [ad, bd, need_a, need_b](const Tensor& g) {
    return std::vector<Tensor>{need_a ? MatmulNoGrad(g, Transpose(bd, 0, 1)) : Tensor(),
                               need_b ? MatmulNoGrad(Transpose(ad, 0, 1), g) : Tensor()};
  });
}

Tensor Linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  RequireFloatOnOneDevice("Linear", {&x, &w, &b});
  DDP_CHECK(x.dim() == 2 && w.dim() == 2 && x.shape()[1] == w.shape()[1])
      << "Linear: input " << ShapeToString(x.shape()) << " with weight " << ShapeToString(w.shape());
  const int64_t n = x.shape()[0], out_features = w.shape()[0];
  if (b.defined()) {
    DDP_CHECK(b.dim() == 1 && b.shape()[0] == out_features) << "Linear: bias " << ShapeToString(b.shape());
  }
  if (AutocastAppliesTo(x) || AutocastCudaAppliesTo(x)) return LinearLowPrecision(x, w, b);
  if (AutocastFp16AppliesTo(x)) {  // Note [fp16 autocast]
    return AutocastFp16Call({x, w}, [&b](const std::vector<Tensor>& r) { return Linear(r[0], r[1], b); });
  }
  Tensor out = Tensor::Empty({n, out_features}, DType::kFloat32, x.device());
  float beta = 0.0f;
  if (b.defined()) {
    FillRowsWithBias(out, b);
    beta = 1.0f;
  }
  MatmulInto(x, Transpose(w.Detach(), 0, 1), out, beta);
  Tensor xd = x.Detach(), wd = w.Detach();
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const bool need_b = b.defined() && b.requires_grad();
  return RecordOp(out, "LinearBackward", {&x, &w, &b}, [xd, wd, need_x, need_w, need_b](const Tensor& g) {
    Tensor gx = need_x ? MatmulNoGrad(g, wd) : Tensor();
    Tensor gw = need_w ? MatmulNoGrad(Transpose(g, 0, 1), xd) : Tensor();
    Tensor gb = need_b ? SumRows(g) : Tensor();
    return std::vector<Tensor>{gx, gw, gb};
  });
}

}  // namespace ddp
