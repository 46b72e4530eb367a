// CPU loops for element-wise ops: contiguous fast paths plus a general strided/broadcast path.
// The math itself comes from tensor/functors.h, shared with the CUDA kernels.
#ifndef DDP_TENSOR_CPU_ELEMENTWISE_H_
#define DDP_TENSOR_CPU_ELEMENTWISE_H_

#include <algorithm>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace ddp {
namespace cpu {

// Strides of `t` as seen from a broadcast `out_shape` (0 along broadcast dimensions).
inline std::vector<int64_t> BroadcastStrides(const Tensor& t, const Shape& out_shape) {
  const size_t n = out_shape.size();
  const size_t offset = n - t.shape().size();
  std::vector<int64_t> strides(n, 0);
  for (size_t i = 0; i < t.shape().size(); ++i) {
    strides[offset + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  }
  return strides;
}

// True when t's elements fill numel() consecutive places of its storage in some order of its dimensions
// (contiguous, channels-last, any permutation of a contiguous tensor), so a loop over that span visits each
// element once.
inline bool IsDense(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // {stride, size} of the dimensions of size > 1
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.shape()[d] != 1) dims.emplace_back(t.strides()[d], t.shape()[d]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

// True when a and b have one shape and one dense layout (IsDense), so element k of one's span is element k of
// the other's.
inline bool SameDenseLayout(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  if (a.is_contiguous() && b.is_contiguous()) return true;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.shape()[d] != 1 && a.strides()[d] != b.strides()[d]) return false;
  }
  return IsDense(a);
}

// Calls visit(out_index, a_offset, b_offset) for every element of `shape` in row-major order, where the
// offsets advance by a_strides / b_strides.
template <typename Visit>
void ForEachIndex(const Shape& shape, const std::vector<int64_t>& a_strides,
                  const std::vector<int64_t>& b_strides, Visit visit) {
  const int64_t total = NumElements(shape);
  if (total == 0) return;
  const size_t nd = shape.size();
  if (nd == 0) {
    visit(0, 0, 0);
    return;
  }
  std::vector<int64_t> counter(nd, 0);
  const int64_t inner = shape[nd - 1];
  const int64_t a_inner = a_strides[nd - 1], b_inner = b_strides[nd - 1];
  int64_t a_base = 0, b_base = 0;
  for (int64_t out = 0; out < total; out += inner) {
    for (int64_t j = 0; j < inner; ++j) visit(out + j, a_base + j * a_inner, b_base + j * b_inner);
    for (int64_t d = static_cast<int64_t>(nd) - 2; d >= 0; --d) {  // advance the outer counter
      ++counter[d];
      a_base += a_strides[d];
      b_base += b_strides[d];
      if (counter[d] < shape[d]) break;
      a_base -= a_strides[d] * shape[d];
      b_base -= b_strides[d] * shape[d];
      counter[d] = 0;
    }
  }
}

// out = f(x) element-wise; out is a new contiguous tensor.
template <typename F>
Tensor UnaryMap(const Tensor& x, F f) {
  Tensor out = Tensor::Empty(x.shape(), DType::kFloat32, x.device());
  float* o = out.data<float>();
  const float* in = x.data<float>();
  if (x.is_contiguous()) {
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = f(in[i]);
  } else {
    ForEachIndex(x.shape(), x.strides(), x.strides(),
                 [&](int64_t i, int64_t xo, int64_t) { o[i] = f(in[xo]); });
  }
  return out;
}

// out = f(a, b) with broadcasting to `out_shape`; out is a new contiguous tensor.
template <typename F>
Tensor BinaryMap(const Tensor& a, const Tensor& b, const Shape& out_shape, F f) {
  Tensor out = Tensor::Empty(out_shape, DType::kFloat32, a.device());
  float* o = out.data<float>();
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const int64_t n = out.numel();
  if (a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous()) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(pa[i], pb[i]);
  } else if (b.numel() == 1 && a.is_contiguous() && a.shape() == out_shape) {
    const float s = pb[0];
    for (int64_t i = 0; i < n; ++i) o[i] = f(pa[i], s);
  } else {
    ForEachIndex(out_shape, BroadcastStrides(a, out_shape), BroadcastStrides(b, out_shape),
                 [&](int64_t i, int64_t ao, int64_t bo) { o[i] = f(pa[ao], pb[bo]); });
  }
  return out;
}

// dst = f(dst, src) in place, src broadcast to dst's shape.
template <typename F>
void BinaryInPlace(const Tensor& dst, const Tensor& src, F f) {
  float* d = dst.data<float>();
  const float* s = src.data<float>();
  const int64_t n = dst.numel();
  if (SameDenseLayout(dst, src)) {  // contiguous, or both in one other dense layout (channels-last)
    for (int64_t i = 0; i < n; ++i) d[i] = f(d[i], s[i]);
  } else if (src.numel() == 1 && dst.is_contiguous()) {
    const float value = s[0];
    for (int64_t i = 0; i < n; ++i) d[i] = f(d[i], value);
  } else {
    ForEachIndex(dst.shape(), dst.strides(), BroadcastStrides(src, dst.shape()),
                 [&](int64_t, int64_t di, int64_t si) { d[di] = f(d[di], s[si]); });
  }
}

// dst = f(dst) in place.
template <typename F>
void UnaryInPlace(const Tensor& dst, F f) {
  float* d = dst.data<float>();
  if (dst.is_contiguous()) {
    const int64_t n = dst.numel();
    for (int64_t i = 0; i < n; ++i) d[i] = f(d[i]);
  } else {
    ForEachIndex(dst.shape(), dst.strides(), dst.strides(),
                 [&](int64_t, int64_t di, int64_t) { d[di] = f(d[di]); });
  }
}

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CPU_ELEMENTWISE_H_
