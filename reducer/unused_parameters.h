// Which parameters a forward pass's outputs do not depend on (find_unused_parameters).
#ifndef DDP_REDUCER_UNUSED_PARAMETERS_H_
#define DDP_REDUCER_UNUSED_PARAMETERS_H_

#include <vector>

#include "tensor/tensor.h"

namespace ddp {

// Walks the autograd graph from `outputs` and returns, for each of `params`, whether its gradient
// sink is reachable (true = used). Cost: one visit per graph node. Call after forward, before backward.
std::vector<bool> FindUsedParameters(const std::vector<Tensor>& outputs, const std::vector<Tensor>& params);

}  // namespace ddp

#endif  // DDP_REDUCER_UNUSED_PARAMETERS_H_
