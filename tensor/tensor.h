// Tensor: an n-dimensional view (shape, strides, offset) over a reference-counted Storage, with the
// autograd state of a variable. START HERE for the tensor floor; ops are in tensor/ops.h, factories in
// tensor/factory.h, the autograd engine's extension points in tensor/autograd.h.
#ifndef DDP_TENSOR_TENSOR_H_
#define DDP_TENSOR_TENSOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/check.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/storage.h"

namespace ddp {

using Shape = std::vector<int64_t>;

class Tensor;
class Node;
class AccumulateGrad;

// Number of elements of a shape (1 for a scalar shape {}).
int64_t NumElements(const Shape& shape);
// Row-major (contiguous) strides of a shape.
std::vector<int64_t> ContiguousStrides(const Shape& shape);
// True when `strides` lay out `shape` contiguously in row-major order (a dimension of extent 1 may have
// any stride).
bool StridesAreContiguous(const Shape& shape, const std::vector<int64_t>& strides);
// "[2, 3]".
std::string ShapeToString(const Shape& shape);

// A hook run after a leaf's gradient has been accumulated (see tensor/autograd.h for when it fires).
// The argument is the leaf itself; its grad() holds the final accumulated gradient.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

// The shared state behind a Tensor handle. Users work with Tensor; ops and the autograd engine use the
// impl directly. Not thread-safe: one thread mutates a tensor at a time.
struct TensorImpl : public std::enable_shared_from_this<TensorImpl> {
  Storage storage;
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::kFloat32;

  // Autograd state.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;           // accumulated gradient of a leaf (null until first)
  std::shared_ptr<Node> grad_fn;              // the node that produced this tensor (null for a leaf)
  std::weak_ptr<AccumulateGrad> accumulator;  // a leaf's gradient sink in the current graph
  std::vector<std::pair<int, PostAccumulateGradHook>> post_accumulate_hooks;
  int next_hook_id = 0;
  std::string name;  // optional, for error messages and traces (e.g. "fc1.weight")

  // A bf16 copy of this tensor's values made by the op that produced it, and the storage version it was
  // made at (Note [Autocast copies from the producer], tensor/autocast.h); null when there is none.
  std::shared_ptr<TensorImpl> autocast_copy;
  uint64_t autocast_copy_version = 0;
};

// A handle to a TensorImpl; copying a Tensor shares the data (like torch.Tensor). A default-constructed
// Tensor is "undefined" (defined() is false). Thread safety: as TensorImpl.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Allocates an uninitialised contiguous tensor.
  static Tensor Empty(const Shape& shape, DType dtype = DType::kFloat32, Device device = Device::CPU());
  // A view of `storage` with the given geometry (no copy). REQUIRES: the view fits in the storage.
  static Tensor View(Storage storage, const Shape& shape, const std::vector<int64_t>& strides, int64_t offset,
                     DType dtype);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl()->shape; }
  int64_t dim() const { return static_cast<int64_t>(impl()->shape.size()); }
  // Size of dimension `d`; negative `d` counts from the end.
  int64_t size(int64_t d) const;
  int64_t numel() const { return NumElements(impl()->shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * ElementSize(dtype()); }
  const std::vector<int64_t>& strides() const { return impl()->strides; }
  int64_t storage_offset() const { return impl()->offset; }
  DType dtype() const { return impl()->dtype; }
  Device device() const { return impl()->storage->device(); }
  const Storage& storage() const { return impl()->storage; }
  bool is_contiguous() const;

  // Pointer to the first element. REQUIRES: T matches dtype() (checked).
  template <typename T>
  T* data() const {
    DDP_CHECK(DTypeOf<T>::value == dtype())
        << "tensor holds " << DTypeName(dtype()) << ", accessed as " << DTypeName(DTypeOf<T>::value);
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const {
    return static_cast<char*>(impl()->storage->data()) + impl()->offset * ElementSize(dtype());
  }

  // The single value of a one-element float32 or int64 tensor, as double (copies from the device).
  double item() const;
  // Copies all elements, in row-major order, to a host vector. REQUIRES: T matches dtype().
  template <typename T>
  std::vector<T> ToVector() const;

  // --- views and copies (views share storage; see tensor/ops.h for the differentiable ops) ---
  // A tensor sharing storage with this one but with no autograd history (like torch's detach()).
  Tensor Detach() const;

  // --- autograd ---
  bool requires_grad() const { return impl()->requires_grad; }
  // Marks a leaf as needing gradients. REQUIRES: is_leaf(). Returns *this for chaining.
  const Tensor& set_requires_grad(bool value) const;
  bool is_leaf() const { return impl()->grad_fn == nullptr; }
  // The accumulated gradient (undefined until a backward pass reached this leaf).
  Tensor grad() const { return Tensor(impl()->grad); }
  // Replaces the gradient (e.g. with a view into a bucket buffer). REQUIRES: same shape and dtype, or
  // undefined to clear it. Later backward passes accumulate into the given tensor in place.
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<Node>& grad_fn() const { return impl()->grad_fn; }
  // Runs the backward pass from this tensor. With no argument this must be a one-element tensor and
  // the seed gradient is 1. See tensor/autograd.h.
  void Backward(const Tensor& gradient = Tensor()) const;
  // Registers a post-accumulate-grad hook on a leaf (tensor/autograd.h: firing order and thread).
  // Returns an id for RemovePostAccumulateGradHook. REQUIRES: is_leaf() and requires_grad().
  int RegisterPostAccumulateGradHook(PostAccumulateGradHook hook) const;
  void RemovePostAccumulateGradHook(int id) const;

  // Optional name used in error messages and traces.
  const std::string& name() const { return impl()->name; }
  void set_name(const std::string& name) const { impl()->name = name; }

  // "Tensor(shape=[2, 3], dtype=float32, device=cpu)" followed by up to 8 values.
  std::string ToString() const;

  TensorImpl* impl() const {
    DDP_CHECK(impl_ != nullptr) << "use of an undefined tensor";
    return impl_.get();
  }
  const std::shared_ptr<TensorImpl>& shared_impl() const { return impl_; }
  // True when both handles refer to the same TensorImpl.
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace ddp

#endif  // DDP_TENSOR_TENSOR_H_
