// Test-only helpers shared by the ProcessGroupShm tests: ranks as threads over one MemoryStore, inputs
// of small integers (every reduction order gives exact results) and their sequential reference.
#ifndef DDP_TESTING_SHM_TEST_UTIL_H_
#define DDP_TESTING_SHM_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <functional>
#include <type_traits>
#include <vector>

#include "comm/shm/process_group_shm.h"
#include "gtest/gtest.h"
#include "testing/run_ranks.h"
#include "tensor/tensor.h"

namespace ddp {
namespace shm_test {

// testing/run_ranks.h's RunRanksWith over ProcessGroupShm: `world` threads, each rank with its own group.
inline void RunShmRanks(int world, const std::function<void(int rank, ProcessGroupShm& group)>& fn,
                        const ProcessGroupShmOptions& options = {}) {
  RunRanksWith(
      world, [&](Store& store, int rank) { return ProcessGroupShm::Create(store, rank, world, options); }, fn);
}

// Rank r's element i: small integers, so every reduction order gives exact results.
inline double Value(int rank, int64_t i, int salt) { return (rank + 1 + salt) * (i % 5 + 1) - 2; }

template <typename T>
Tensor Input(int rank, int64_t n, int salt, DType dtype) {
  Tensor t = Tensor::Empty({n}, dtype);
  T* p = static_cast<T*>(t.raw_data());
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(Value(rank, i, salt));
  return t;
}

template <typename T>
std::vector<T> Reference(int world, int64_t n, int salt, ReduceOp op, int shift = 0) {
  std::vector<T> out(n);
  for (int64_t i = 0; i < n; ++i) {
    T acc = static_cast<T>(Value(shift, i, salt));
    for (int r = 1; r < world; ++r) {
      const T x = static_cast<T>(Value(r + shift, i, salt));
      if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += x;
      if (op == ReduceOp::kProduct) acc *= x;
      if (op == ReduceOp::kMin) acc = std::min(acc, x);
      if (op == ReduceOp::kMax) acc = std::max(acc, x);
    }
    if (op == ReduceOp::kAvg) {
      if constexpr (std::is_integral_v<T>) {
        acc = static_cast<T>(std::floor(static_cast<double>(acc) / world));
      } else {
        acc /= static_cast<T>(world);
      }
    }
    out[i] = acc;
  }
  return out;
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  const T* p = static_cast<const T*>(t.raw_data());
  return std::vector<T>(p, p + t.numel());
}

}  // namespace shm_test
}  // namespace ddp

#endif  // DDP_TESTING_SHM_TEST_UTIL_H_
