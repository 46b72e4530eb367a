#include "testing/tensor_agreement.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ddp {

double NormalizedError(const Tensor& a, const Tensor& b) {
  std::vector<float> va = a.ToVector<float>(), vb = b.ToVector<float>();
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < va.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(va[i] - vb[i])));
    scale = std::max(scale, static_cast<double>(std::abs(vb[i])));
  }
  return diff / scale;
}

::testing::AssertionResult Agree(const Tensor& got, const Tensor& want) {
  if (!got.defined() || !want.defined() || got.shape() != want.shape()) {
    return ::testing::AssertionFailure() << "undefined or differently shaped";
  }
  const double relative = NormalizedError(got, want);
  if (relative <= 1e-5) return ::testing::AssertionSuccess();
  double got_max = 0, want_max = 0;
  for (float v : got.ToVector<float>()) got_max = std::max(got_max, static_cast<double>(std::abs(v)));
  for (float v : want.ToVector<float>()) want_max = std::max(want_max, static_cast<double>(std::abs(v)));
  if (got_max < 1e-5 && want_max < 1e-5 && relative * want_max <= 1e-6) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative error " << relative << " (largest reference entry " << want_max
                                       << ")";
}

}  // namespace ddp
