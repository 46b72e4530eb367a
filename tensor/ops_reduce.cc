// Reductions: sum and mean over all or some dims, argmax; once for both devices, with only the kernel
// calls branching on the device.
#include <algorithm>

#include "tensor/cpu_elementwise.h"
#include "tensor/elementwise_kernels.h"
#include "tensor/function_node.h"
#include "tensor/functors.h"
#include "tensor/op_device.h"
#include "tensor/ops.h"
#ifdef DDP_WITH_CUDA
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

// *out = the sum of contiguous x's elements, accumulated in double, on x's device.
void SumAllInto(const Tensor& x, const Tensor& out) {
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) {
    cuda::DeviceGuard guard(x.device().index);
    DDP_CUDA_CHECK(cuda::kernels::SumAll(x.data<float>(), x.numel(), out.data<float>(), cuda::StreamOf(x)));
    return;
  }
#endif
  double total = 0.0;
  const float* p = x.data<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) total += p[i];
  *out.data<float>() = static_cast<float>(total);
}

#ifdef DDP_WITH_CUDA
// SumDimsInto's CUDA kernel: one output per kept index, each walking the reduced index space of x.
void SumDimsOnCuda(const Tensor& x, const std::vector<bool>& mask, const Tensor& out) {
  Shape kept_shape, reduced_shape;
  std::vector<int64_t> kept_strides, reduced_strides;
  for (size_t i = 0; i < mask.size(); ++i) {
    (mask[i] ? reduced_shape : kept_shape).push_back(x.shape()[i]);
    (mask[i] ? reduced_strides : kept_strides).push_back(x.strides()[i]);
  }
  cuda::kernels::Indexer kept = cuda::MakeIndexer(kept_shape, kept_strides, {});
  cuda::kernels::Indexer reduced = cuda::MakeIndexer(reduced_shape, reduced_strides, {});
  kept.contiguous = false;  // the reduce kernels always use the general offsets
  reduced.contiguous = false;
  cuda::DeviceGuard guard(x.device().index);
  DDP_CUDA_CHECK(
      cuda::kernels::SumReduce(x.data<float>(), out.data<float>(), kept, reduced, cuda::StreamOf(x)));
}
#endif

// out = x summed over the masked dims, for `out` contiguous with x's shape and the masked dims 1, on x's
// device.
void SumDimsInto(const Tensor& x, const std::vector<bool>& mask, const Tensor& out) {
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) {
    SumDimsOnCuda(x, mask, out);
    return;
  }
#endif
  FillInPlace(out, 0.0f);
  float* o = out.data<float>();
  const float* in = x.data<float>();
  std::vector<int64_t> out_strides = ContiguousStrides(out.shape());
  for (size_t i = 0; i < mask.size(); ++i) if (mask[i]) out_strides[i] = 0;
  cpu::ForEachIndex(x.shape(), x.strides(), out_strides,
                    [&](int64_t, int64_t xi, int64_t oi) { o[oi] += in[xi]; });
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
  RequireFloatOnOneDevice("Sum", {&x});
  Tensor c = x.is_contiguous() ? x : Contiguous(x.Detach());
  Tensor out = Tensor::Empty({}, DType::kFloat32, x.device());
  SumAllInto(c, out);
  const Shape shape = x.shape();
  return RecordOp(out, "SumBackward", {&x}, [shape](const Tensor& g) {
    // The scalar gradient broadcast on g's device (no round trip through the host).
    Tensor grad = Tensor::Empty(shape, DType::kFloat32, g.device());
    MapBinaryInPlace(grad, g, functors::Assign());
    return std::vector<Tensor>{grad};
  });
}

Tensor Sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  RequireFloatOnOneDevice("Sum", {&x});
  const std::vector<bool> mask = ReducedMask(dims, x.dim());
  Shape kept = x.shape();
  for (size_t i = 0; i < mask.size(); ++i) if (mask[i]) kept[i] = 1;
  Tensor out = Tensor::Empty(kept, DType::kFloat32, x.device());
  SumDimsInto(x, mask, out);
  if (!keepdim) {
    Shape squeezed;
    for (size_t i = 0; i < mask.size(); ++i) if (!mask[i]) squeezed.push_back(kept[i]);
    out = Tensor::View(out.storage(), squeezed, ContiguousStrides(squeezed), 0, DType::kFloat32);
  }
  const Shape shape = x.shape();
  return RecordOp(out, "SumDimsBackward", {&x}, [shape, kept](const Tensor& g) {
    Tensor grad = Tensor::Empty(shape, DType::kFloat32, g.device());
    MapBinaryInPlace(grad, Reshape(g, kept), functors::Assign());
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
