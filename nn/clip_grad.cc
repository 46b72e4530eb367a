#include "nn/clip_grad.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "tensor/autograd.h"
#include "base/check.h"
#include "tensor/ops.h"

namespace ddp {

absl::StatusOr<double> ClipGradNorm(const std::vector<Tensor>& params, double max_norm,
                                    const SquaredNormSum& squared_norm_sum) {
  DDP_CHECK(max_norm > 0) << "ClipGradNorm: max_norm must be positive, got " << max_norm;
  NoGradGuard no_grad;
  double squared = 0.0;
  for (const Tensor& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    squared += static_cast<double>(Sum(Mul(g, g)).item());
  }
  if (squared_norm_sum != nullptr) {
    absl::StatusOr<double> total = squared_norm_sum(squared);
    if (!total.ok()) {
      return absl::Status(total.status().code(),
                          absl::StrCat("ClipGradNorm: summing squared norms: ", total.status().message()));
    }
    squared = *total;
  }
  const double norm = std::sqrt(squared);
  const double scale = max_norm / (norm + 1e-6);
  if (scale >= 1.0) return norm;
  for (const Tensor& p : params) {
    if (p.grad().defined()) MulScalarInPlace(p.grad(), static_cast<float>(scale));
  }
  return norm;
}

}  // namespace ddp
