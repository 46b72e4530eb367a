// BestMs: the shortest wall time of repeated calls, for the tensor floor's micro-benchmarks
// (tensor/amx_kernel_bench.cc, tensor/batch_norm_bench.cc).
#ifndef DDP_TENSOR_BENCH_BEST_TIME_H_
#define DDP_TENSOR_BENCH_BEST_TIME_H_

#include <algorithm>
#include <chrono>

namespace ddp {

// Calls f() `reps` times (at least once) and returns the shortest call in milliseconds: on a shared machine
// the minimum is the steadiest figure of what the call itself costs.
template <typename F>
double BestMs(int reps, F f) {
  double best = 1e30;
  for (int r = 0; r < std::max(reps, 1); ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    best = std::min(
        best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace ddp

#endif  // DDP_TENSOR_BENCH_BEST_TIME_H_
