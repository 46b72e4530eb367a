// Test-only comparisons of float tensors against a reference, as the DDP / DataParallel parity tests
// bound them (relative error 1e-5, with an absolute escape for tensors that are zero up to rounding).
#ifndef DDP_TESTING_TENSOR_AGREEMENT_H_
#define DDP_TESTING_TENSOR_AGREEMENT_H_

#include <gtest/gtest.h>

#include "tensor/tensor.h"

namespace ddp {

// max |a - b| / max |b| over the tensor. REQUIRES: float32 tensors of equal numel.
double NormalizedError(const Tensor& a, const Tensor& b);

// Success when NormalizedError(got, want) <= 1e-5; or, for a tensor that is zero up to rounding in both
// (a conv bias followed by batch norm has a gradient of exactly 0 in exact arithmetic, ~1e-7 in float),
// when the absolute error is <= 1e-6. Fails (saying why) on undefined or differently shaped tensors.
::testing::AssertionResult Agree(const Tensor& got, const Tensor& want);

}  // namespace ddp

#endif  // DDP_TESTING_TENSOR_AGREEMENT_H_
