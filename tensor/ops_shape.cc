// Shape ops: views where possible, copies (differentiable) where not.
#include <cstring>

#include "tensor/cpu_elementwise.h"
#include "tensor/function_node.h"
#include "tensor/memory_format.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

int64_t WrapDim(int64_t dim, int64_t ndim) {
  if (dim < 0) dim += ndim;
  DDP_CHECK(dim >= 0 && dim < std::max<int64_t>(ndim, 1)) << "dimension " << dim << " out of range for "
                                                          << ndim << "-d tensor";
  return dim;
}

Shape InferShape(Shape shape, int64_t numel) {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      DDP_CHECK(infer < 0) << "reshape: more than one -1 in " << ShapeToString(shape);
      infer = static_cast<int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    DDP_CHECK(known > 0 && numel % known == 0) << "reshape: cannot infer -1 in " << ShapeToString(shape);
    shape[infer] = numel / known;
  }
  DDP_CHECK(NumElements(shape) == numel) << "reshape: " << numel << " elements into " << ShapeToString(shape);
  return shape;
}

}  // namespace

Tensor Contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  return Clone(x);
}

Tensor ContiguousChannelsLast(const Tensor& x) {
  if (HasChannelsLastStrides(x)) return x;
  // A tensor already laid out so (a [n, 1, h, w] one, say) is given the canonical strides without a copy.
  const Tensor out = IsChannelsLast(x) ? Tensor::View(x.storage(), x.shape(), ChannelsLastStrides(x.shape()),
                                                      x.storage_offset(), x.dtype())
                                       : ChannelsLastCopy(x);
  return RecordOp(out, "ContiguousChannelsLastBackward", {&x},
                  [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor Clone(const Tensor& x) {
  Tensor out = Tensor::Empty(x.shape(), x.dtype(), x.device());
  if (x.device().is_cpu() && x.is_contiguous()) {
    std::memcpy(out.raw_data(), x.raw_data(), x.nbytes());
  } else {
    CopyInPlace(out, x.Detach());
  }
  return RecordOp(out, "CloneBackward", {&x}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor Reshape(const Tensor& x, const Shape& shape) {
  const Shape target = InferShape(shape, x.numel());
  Tensor base = Contiguous(x);
  Tensor out = Tensor::View(base.storage(), target, ContiguousStrides(target), base.storage_offset(), x.dtype());
  const Shape original = x.shape();
  return RecordOp(out, "ReshapeBackward", {&base},
                  [original](const Tensor& g) { return std::vector<Tensor>{Reshape(g, original)}; });
}

Tensor Flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  const int64_t nd = x.dim();
  if (nd == 0) return Reshape(x, {1});
  start_dim = WrapDim(start_dim, nd);
  end_dim = WrapDim(end_dim, nd);
  Shape shape;
  for (int64_t i = 0; i < start_dim; ++i) shape.push_back(x.shape()[i]);
  int64_t merged = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) merged *= x.shape()[i];
  shape.push_back(merged);
  for (int64_t i = end_dim + 1; i < nd; ++i) shape.push_back(x.shape()[i]);
  return Reshape(x, shape);
}

Tensor Transpose(const Tensor& x, int64_t d0, int64_t d1) {
  d0 = WrapDim(d0, x.dim());
  d1 = WrapDim(d1, x.dim());
  Shape shape = x.shape();
  std::vector<int64_t> strides = x.strides();
  std::swap(shape[d0], shape[d1]);
  std::swap(strides[d0], strides[d1]);
  Tensor out = Tensor::View(x.storage(), shape, strides, x.storage_offset(), x.dtype());
  return RecordOp(out, "TransposeBackward", {&x},
                  [d0, d1](const Tensor& g) { return std::vector<Tensor>{Transpose(g, d0, d1)}; });
}

Tensor Narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  dim = WrapDim(dim, x.dim());
  DDP_CHECK(start >= 0 && length >= 0 && start + length <= x.shape()[dim])
      << "narrow(" << dim << ", " << start << ", " << length << ") of " << ShapeToString(x.shape());
  Shape shape = x.shape();
  shape[dim] = length;
  Tensor out = Tensor::View(x.storage(), shape, x.strides(), x.storage_offset() + start * x.strides()[dim],
                            x.dtype());
  const Shape original = x.shape();
  return RecordOp(out, "NarrowBackward", {&x}, [original, dim, start, length](const Tensor& g) {
    Tensor full = Tensor::Empty(original, g.dtype(), g.device());
    FillInPlace(full, 0.0f);
    CopyInPlace(Narrow(full, dim, start, length), g);
    return std::vector<Tensor>{full};
  });
}

Tensor Cat(const std::vector<Tensor>& xs, int64_t dim) {
  DDP_CHECK(!xs.empty()) << "Cat of no tensors";
  dim = WrapDim(dim, xs[0].dim());
  Shape shape = xs[0].shape();
  shape[dim] = 0;
  for (const Tensor& x : xs) {
    Shape s = x.shape();
    DDP_CHECK(s.size() == shape.size()) << "Cat: rank mismatch";
    s[dim] = shape[dim];
    DDP_CHECK(s == shape) << "Cat: " << ShapeToString(x.shape()) << " does not match along other dims";
    shape[dim] += x.shape()[dim];
  }
  Tensor out = Tensor::Empty(shape, xs[0].dtype(), xs[0].device());
  std::vector<int64_t> sizes;
  int64_t start = 0;
  for (const Tensor& x : xs) {
    CopyInPlace(Narrow(out.Detach(), dim, start, x.shape()[dim]), x.Detach());
    start += x.shape()[dim];
    sizes.push_back(x.shape()[dim]);
  }
  bool any_requires_grad = false;
  for (const Tensor& x : xs) any_requires_grad = any_requires_grad || AnyRequiresGrad({&x});
  if (!any_requires_grad) return out;
  auto node = std::make_shared<FunctionNode>("CatBackward", [sizes, dim](const Tensor& g) {
    std::vector<Tensor> grads;
    int64_t offset = 0;
    for (int64_t size : sizes) {
      grads.push_back(Contiguous(Narrow(g, dim, offset, size)));
      offset += size;
    }
    return grads;
  });
  node->next_edges.clear();
  for (const Tensor& x : xs) node->next_edges.push_back(GradientEdge(x));
  out.impl()->requires_grad = true;
  out.impl()->grad_fn = node;
  return out;
}

}  // namespace ddp
