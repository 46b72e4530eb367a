#include "tensor/tensor.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

namespace ddp {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<int64_t> ContiguousStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::string ShapeToString(const Shape& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

Tensor Tensor::Empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) DDP_CHECK(d >= 0) << "negative dimension in shape " << ShapeToString(shape);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = NewStorage(static_cast<size_t>(NumElements(shape)) * ElementSize(dtype), device);
  impl->shape = shape;
  impl->strides = ContiguousStrides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::View(Storage storage, const Shape& shape, const std::vector<int64_t>& strides,
                    int64_t offset, DType dtype) {
  DDP_CHECK(shape.size() == strides.size()) << "shape and strides differ in rank";
  int64_t last = offset;
  for (size_t i = 0; i < shape.size(); ++i) {
    DDP_CHECK(shape[i] >= 0 && strides[i] >= 0) << "bad view geometry";
    if (shape[i] > 0) last += (shape[i] - 1) * strides[i];
  }
  if (NumElements(shape) > 0) {
    DDP_CHECK(static_cast<size_t>(last + 1) * ElementSize(dtype) <= storage->nbytes())
        << "view " << ShapeToString(shape) << " at offset " << offset << " exceeds its storage of "
        << storage->nbytes() << " bytes";
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  if (d < 0) d += n;
  DDP_CHECK(d >= 0 && d < n) << "dimension " << d << " out of range for shape " << ShapeToString(shape());
  return shape()[d];
}

bool StridesAreContiguous(const Shape& shape, const std::vector<int64_t>& strides) {
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

bool Tensor::is_contiguous() const { return StridesAreContiguous(shape(), strides()); }

double Tensor::item() const {
  DDP_CHECK(numel() == 1) << "item() of a tensor with " << numel() << " elements";
  Tensor host = ToDevice(*this, Device::CPU());
  if (dtype() == DType::kInt64) return static_cast<double>(*host.data<int64_t>());
  Tensor f = ToDType(host, DType::kFloat32);
  return *f.data<float>();
}

template <typename T>
std::vector<T> Tensor::ToVector() const {
  Tensor host = Contiguous(ToDevice(*this, Device::CPU()));
  const T* p = host.data<T>();
  return std::vector<T>(p, p + host.numel());
}
template std::vector<float> Tensor::ToVector<float>() const;
template std::vector<int64_t> Tensor::ToVector<int64_t>() const;

Tensor Tensor::Detach() const {
  return View(storage(), shape(), strides(), storage_offset(), dtype());
}

const Tensor& Tensor::set_requires_grad(bool value) const {
  DDP_CHECK(is_leaf()) << "set_requires_grad on a non-leaf tensor";
  DDP_CHECK(!value || dtype() == DType::kFloat32) << "only float32 tensors can require grad";
  impl()->requires_grad = value;
  return *this;
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    DDP_CHECK(grad.shape() == shape() && grad.dtype() == dtype())
        << "set_grad: gradient " << ShapeToString(grad.shape()) << " does not match tensor "
        << ShapeToString(shape());
  }
  impl()->grad = grad.shared_impl();
}

void Tensor::Backward(const Tensor& gradient) const { RunBackward(*this, gradient); }

int Tensor::RegisterPostAccumulateGradHook(PostAccumulateGradHook hook) const {
  DDP_CHECK(is_leaf() && requires_grad()) << "post-accumulate-grad hooks need a leaf that requires grad";
  const int id = impl()->next_hook_id++;
  impl()->post_accumulate_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::RemovePostAccumulateGradHook(int id) const {
  auto& hooks = impl()->post_accumulate_hooks;
  hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [id](const auto& h) { return h.first == id; }),
              hooks.end());
}

std::string Tensor::ToString() const {
  if (!defined()) return "Tensor(undefined)";
  std::string out = absl::StrCat("Tensor(shape=", ShapeToString(shape()), ", dtype=", DTypeName(dtype()),
                                 ", device=", device().ToString());
  if (dtype() == DType::kFloat32 || dtype() == DType::kInt64) {
    Tensor host = Contiguous(ToDevice(*this, Device::CPU()));
    const int64_t n = std::min<int64_t>(numel(), 8);
    absl::StrAppend(&out, ", values=[");
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0) absl::StrAppend(&out, ", ");
      if (dtype() == DType::kFloat32) absl::StrAppend(&out, host.data<float>()[i]);
      else absl::StrAppend(&out, host.data<int64_t>()[i]);
    }
    absl::StrAppend(&out, numel() > n ? ", ...]" : "]");
  }
  return out + ")";
}

}  // namespace ddp
