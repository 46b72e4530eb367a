// Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_: the L2 norm over every gradient
// of `params` together; when it exceeds `max_norm` every gradient is scaled in place by
// max_norm / (norm + 1e-6). Under DDP call it after backward: the gradients are already averaged and
// identical on every rank, so each rank computes the same norm without communicating (a sharded
// optimizer, where each rank holds a part of the gradients, must sum the squared norms across ranks
// first: that is what `squared_norm_sum` is for).
#ifndef DDP_NN_CLIP_GRAD_H_
#define DDP_NN_CLIP_GRAD_H_

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace ddp {

// Sum over ranks of a squared norm (identity when null). Returns the error of the exchange.
using SquaredNormSum = std::function<absl::StatusOr<double>(double local_squared_norm)>;

// Clips as above and returns the total norm before clipping. Parameters without a gradient are
// skipped. REQUIRES: max_norm > 0; gradients are float32 (any device). Thread safety: not thread-safe
// with respect to the gradients it scales.
absl::StatusOr<double> ClipGradNorm(const std::vector<Tensor>& params, double max_norm,
                                    const SquaredNormSum& squared_norm_sum = nullptr);

}  // namespace ddp

#endif  // DDP_NN_CLIP_GRAD_H_
