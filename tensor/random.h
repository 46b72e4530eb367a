// Explicit, seeded random number generation: every random op takes a Generator, so runs are
// reproducible and threads (DataParallel replicas, loader workers) never share hidden global state.
#ifndef DDP_TENSOR_RANDOM_H_
#define DDP_TENSOR_RANDOM_H_

#include <cstdint>
#include <random>
#include <string>

#include "absl/status/status.h"

namespace ddp {

// A 64-bit Mersenne Twister with PyTorch-like helpers. Not thread-safe: one owner thread at a time.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : engine_(seed) {}

  // Uniform in [low, high).
  float Uniform(float low, float high);
  // Normal with mean and standard deviation.
  float Normal(float mean, float stddev);
  // A uniformly random integer in [0, n). REQUIRES: n > 0.
  uint64_t RandomIndex(uint64_t n);
  // Raw 64 random bits.
  uint64_t Next() { return engine_(); }

  // The full state as text (checkpoints), and its inverse (an error names what was malformed).
  std::string SaveState() const;
  absl::Status LoadState(const std::string& state);

 private:
  std::mt19937_64 engine_;
};

}  // namespace ddp

#endif  // DDP_TENSOR_RANDOM_H_
