#include "sim/straggler.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/synchronization/mutex.h"
#include "base/check.h"

namespace ddp {
namespace sim {
namespace {

// E[max] = integral of x * n * phi(x) * Phi(x)^(n-1) over x, by the trapezoid rule on [-9, 9] (the
// integrand is below 1e-17 outside for any n up to 10^9).
double Integrate(int n) {
  constexpr double kLow = -9.0, kHigh = 9.0;
  constexpr int kSteps = 18000;
  const double h = (kHigh - kLow) / kSteps;
  const double inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * M_PI);
  double sum = 0;
  for (int i = 0; i <= kSteps; ++i) {
    const double x = kLow + i * h;
    const double phi = inv_sqrt_2pi * std::exp(-0.5 * x * x);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    const double f = x * n * phi * std::pow(cdf, n - 1);
    sum += (i == 0 || i == kSteps) ? 0.5 * f : f;
  }
  return sum * h;
}

}  // namespace

double ExpectedMaxOfStandardNormals(int n) {
  DDP_CHECK(n >= 1) << "ExpectedMaxOfStandardNormals: n = " << n;
  if (n == 1) return 0.0;
  static absl::Mutex mu(absl::kConstInit);
  static auto* cache = new std::map<int, double>();
  absl::MutexLock lock(&mu);
  auto it = cache->find(n);
  if (it == cache->end()) it = cache->emplace(n, Integrate(n)).first;
  return it->second;
}

double StragglerDelay(double jitter_s, int world_size, double fraction) {
  DDP_CHECK(world_size >= 1 && jitter_s >= 0) << "StragglerDelay: world_size " << world_size << ", jitter "
                                              << jitter_s;
  if (jitter_s == 0 || world_size == 1) return 0.0;
  return jitter_s * std::sqrt(std::clamp(fraction, 0.0, 1.0)) * ExpectedMaxOfStandardNormals(world_size);
}

}  // namespace sim
}  // namespace ddp
