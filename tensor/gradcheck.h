// Finite-difference gradient checking for tests (Flashlight's AutogradTestUtils, PyTorch's gradcheck).
#ifndef DDP_TENSOR_GRADCHECK_H_
#define DDP_TENSOR_GRADCHECK_H_

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

}  // namespace ddp

#endif  // DDP_TENSOR_GRADCHECK_H_
