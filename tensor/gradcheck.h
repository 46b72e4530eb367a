// Finite-difference gradient checking for tests (Flashlight's AutogradTestUtils, PyTorch's gradcheck).
#ifndef DDP_TENSOR_GRADCHECK_H_
#define DDP_TENSOR_GRADCHECK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace ddp {

struct GradCheckOptions {
  float epsilon = 1e-2f;         // central-difference step (float32 needs a large one)
  float relative_tolerance = 2e-2f;  // on |analytic - numeric| / max(|numeric|, 1)
  int max_elements_per_input = 64;   // probe at most this many elements of each input (spread evenly)
};

// Checks the analytic gradient of sum(fn(inputs) * weights) with respect to every input that requires
// grad against central finite differences, where `weights` is a fixed pseudo-random tensor shaped like
// the output (so every output element matters). Returns "" on success, else a description of the first
// mismatch (input index, element, both values). `fn` must be deterministic.
std::string GradCheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                      const std::vector<Tensor>& inputs, const GradCheckOptions& options = {});

// A float32 leaf of `shape` with values uniform in [low, high) from Generator(seed), requiring grad: the
// usual input of a gradient check.
Tensor UniformLeaf(const Shape& shape, uint64_t seed, float low = -1.0f, float high = 1.0f);

}  // namespace ddp

#endif  // DDP_TENSOR_GRADCHECK_H_
