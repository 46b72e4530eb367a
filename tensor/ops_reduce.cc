// Reductions: sum and mean over all or some dims, argmax.
#include <algorithm>

#include "tensor/cpu_elementwise.h"
#include "tensor/device_guard.h"
#include "tensor/function_node.h"
#include "tensor/op_device.h"
#include "tensor/ops.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/op_util.h"
#endif

namespace ddp {
namespace {

std::vector<bool> ReducedMask(const std::vector<int64_t>& dims, int64_t ndim) {
  std::vector<bool> mask(ndim, false);
  for (int64_t d : dims) {
    const int64_t w = d < 0 ? d + ndim : d;
    DDP_CHECK(w >= 0 && w < ndim) << "reduction dim " << d << " out of range for " << ndim << "-d tensor";
    mask[w] = true;
  }
  return mask;
}

// Sum over the masked dims of a CPU float tensor; output keeps the dims with size 1.
Tensor SumKeepDims(const Tensor& x, const std::vector<bool>& mask) {
  Shape out_shape = x.shape();
  for (size_t i = 0; i < mask.size(); ++i) if (mask[i]) out_shape[i] = 1;
  Tensor out = Tensor::Empty(out_shape, DType::kFloat32, x.device());
  FillInPlace(out, 0.0f);
  float* o = out.data<float>();
  const float* in = x.data<float>();
  std::vector<int64_t> out_strides = ContiguousStrides(out_shape);
  for (size_t i = 0; i < mask.size(); ++i) if (mask[i]) out_strides[i] = 0;
  cpu::ForEachIndex(x.shape(), x.strides(), out_strides,
                    [&](int64_t, int64_t xi, int64_t oi) { o[oi] += in[xi]; });
  return out;
}

// out[a, b] = argmax_k x[a, k, b] (ties: the first) for contiguous x [outer, n, inner] and int64 out
// [outer, inner], on x's device.
void ArgmaxInto(const Tensor& x, int64_t outer, int64_t n, int64_t inner, const Tensor& out) {
  const float* p = x.data<float>();
  int64_t* o = out.data<int64_t>();
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) {
    cuda::DeviceGuard guard(x.device().index);
    DDP_CUDA_CHECK(cuda::kernels::Argmax(p, o, outer, n, inner, cuda::StreamOf(x)));
    return;
  }
#endif
  for (int64_t a = 0; a < outer; ++a) {
    for (int64_t b = 0; b < inner; ++b) {
      const float* base = p + a * n * inner + b;
      int64_t best = 0;
      for (int64_t k = 1; k < n; ++k) if (base[k * inner] > base[best * inner]) best = k;
      o[a * inner + b] = best;
    }
  }
}

}  // namespace

Tensor Sum(const Tensor& x) {
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) return cuda::Sum(x);
#endif
  RequireCpuFloat("Sum", {&x});
  Tensor c = x.is_contiguous() ? x : Contiguous(x.Detach());
  double total = 0.0;
  const float* p = c.data<float>();
  for (int64_t i = 0; i < c.numel(); ++i) total += p[i];
  Tensor out = Tensor::Empty({}, DType::kFloat32, x.device());
  *out.data<float>() = static_cast<float>(total);
  const Shape shape = x.shape();
  return RecordOp(out, "SumBackward", {&x}, [shape](const Tensor& g) {
    Tensor grad = Tensor::Empty(shape, DType::kFloat32, g.device());
    FillInPlace(grad, static_cast<float>(g.item()));
    return std::vector<Tensor>{grad};
  });
}

Tensor Sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) return cuda::Sum(x, dims, keepdim);
#endif
  RequireCpuFloat("Sum", {&x});
  const std::vector<bool> mask = ReducedMask(dims, x.dim());
  Tensor out = SumKeepDims(x, mask);
  Shape kept = out.shape();
  if (!keepdim) {
    Shape squeezed;
    for (size_t i = 0; i < mask.size(); ++i) if (!mask[i]) squeezed.push_back(kept[i]);
    out = Tensor::View(out.storage(), squeezed, ContiguousStrides(squeezed), 0, DType::kFloat32);
  }
  const Shape shape = x.shape();
  return RecordOp(out, "SumDimsBackward", {&x}, [shape, kept](const Tensor& g) {
    Tensor grad = Tensor::Empty(shape, DType::kFloat32, g.device());
    FillInPlace(grad, 0.0f);
    AddInPlace(grad, Reshape(g, kept));
    return std::vector<Tensor>{grad};
  });
}

Tensor Mean(const Tensor& x) {
  return MulScalar(Sum(x), 1.0f / static_cast<float>(std::max<int64_t>(x.numel(), 1)));
}

Tensor Mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const std::vector<bool> mask = ReducedMask(dims, x.dim());
  int64_t count = 1;
  for (size_t i = 0; i < mask.size(); ++i) if (mask[i]) count *= x.shape()[i];
  return MulScalar(Sum(x, dims, keepdim), 1.0f / static_cast<float>(std::max<int64_t>(count, 1)));
}

Tensor Argmax(const Tensor& x, int64_t dim) {
  RequireFloatOnOneDevice("Argmax", {&x});
  const int64_t nd = x.dim();
  if (dim < 0) dim += nd;
  DDP_CHECK(dim >= 0 && dim < nd) << "Argmax dim out of range";
  Tensor c = Contiguous(x.Detach());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= c.shape()[i];
  for (int64_t i = dim + 1; i < nd; ++i) inner *= c.shape()[i];
  const int64_t n = c.shape()[dim];
  DDP_CHECK(n > 0) << "Argmax over an empty dimension";
  Shape out_shape;
  for (int64_t i = 0; i < nd; ++i) if (i != dim) out_shape.push_back(c.shape()[i]);
  Tensor out = Tensor::Empty(out_shape, DType::kInt64, x.device());
  ArgmaxInto(c, outer, n, inner, out);
  return out;
}

}  // namespace ddp
