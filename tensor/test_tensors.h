// Helpers the tensor floor's op tests share. Test-only.
#ifndef DDP_TENSOR_TEST_TENSORS_H_
#define DDP_TENSOR_TEST_TENSORS_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/autocast.h"
#include "tensor/autograd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace ddp {
namespace testing_tensors {

// A float32 leaf of `shape` drawn uniformly from [low, high) with Generator(seed), requiring grad.
inline Tensor Leaf(const Shape& shape, uint64_t seed, float low, float high) {
  Generator g(seed);
  Tensor t = Uniform(shape, low, high, g);
  t.set_requires_grad(true);
  return t;
}

// Expects a and b (float32, one shape) to hold the same bits element for element (a NaN equals itself);
// the failure names `what` and how many elements differ.
inline void ExpectSameBits(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const std::vector<float> va = a.ToVector<float>(), vb = b.ToVector<float>();
  size_t differing = 0;
  for (size_t i = 0; i < va.size(); ++i) differing += std::memcmp(&va[i], &vb[i], sizeof(float)) != 0;
  EXPECT_EQ(differing, 0u) << what << ": " << differing << " of " << va.size() << " elements differ";
}

// The output and the input and weight gradients of one convolution, in row-major order.
struct ConvGradients {
  std::vector<float> y, gx, gw;
};

// Conv2d(x, w, no bias, stride, padding 1) forward on copies of x0 (channels-last or NCHW) and w0, under
// bf16 autocast or in float32, then backward from gy_of(y's shape).
template <typename GradientOf>
ConvGradients Conv2dGradients(const Tensor& x0, const Tensor& w0, int64_t stride, bool bf16,
                              bool channels_last, GradientOf gy_of) {
  Tensor x = channels_last ? ContiguousChannelsLast(x0.Detach()) : Clone(x0.Detach());
  Tensor w = Clone(w0.Detach());
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  Tensor y;
  {
    AutocastScope scope(bf16);
    y = Conv2d(x, w, Tensor(), stride, 1);
  }
  y.Backward(gy_of(y.shape()));
  return {y.ToVector<float>(), x.grad().ToVector<float>(), w.grad().ToVector<float>()};
}

}  // namespace testing_tensors
}  // namespace ddp

#endif  // DDP_TENSOR_TEST_TENSORS_H_
