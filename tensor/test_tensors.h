// Helpers the tensor floor's op tests share. Test-only.
#ifndef DDP_TENSOR_TEST_TENSORS_H_
#define DDP_TENSOR_TEST_TENSORS_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/factory.h"
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

}  // namespace testing_tensors
}  // namespace ddp

#endif  // DDP_TENSOR_TEST_TENSORS_H_
