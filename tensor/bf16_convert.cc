#include "tensor/bf16_convert.h"

#include <algorithm>
#include <cstring>

namespace ddp {
namespace cpu {
namespace {

// Arrays above this many elements are converted by several threads.
constexpr int64_t kParallelElements = int64_t{1} << 17;

// The loops are branch-free so that the compiler vectorises them; target_clones builds an AVX-512
// copy beside the default (AVX2) one and picks one at load time.
__attribute__((target_clones("arch=x86-64-v4", "default"))) void ToBf16Range(const float* src, BFloat16* dst,
                                                                             int64_t n) {
  FloatToBFloat16Inline(src, dst, n);
}

__attribute__((target_clones("arch=x86-64-v4", "default"))) void ToFloatRange(const BFloat16* src, float* dst,
                                                                              int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t x = static_cast<uint32_t>(src[i].bits) << 16;
    std::memcpy(dst + i, &x, 4);
  }
}

// Runs body(begin, end) over [0, n) in chunks, on the kernel threads when n is large.
template <typename Body>
void ForChunks(int64_t n, Body body) {
  if (n <= kParallelElements) {  // no OpenMP region at all: entering one costs even when it runs alone
    body(0, n);
    return;
  }
  constexpr int64_t kChunk = int64_t{1} << 15;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for if (n > kParallelElements)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    body(begin, std::min(n, begin + kChunk));
  }
}

}  // namespace

void FloatToBFloat16Array(const float* src, BFloat16* dst, int64_t n) {
  ForChunks(n, [&](int64_t begin, int64_t end) { ToBf16Range(src + begin, dst + begin, end - begin); });
}

void FloatToBFloat16Run(const float* src, BFloat16* dst, int64_t n) { ToBf16Range(src, dst, n); }

void BFloat16ToFloatRun(const BFloat16* src, float* dst, int64_t n) { ToFloatRange(src, dst, n); }

void BFloat16ToFloatArray(const BFloat16* src, float* dst, int64_t n) {
  ForChunks(n, [&](int64_t begin, int64_t end) { ToFloatRange(src + begin, dst + begin, end - begin); });
}

}  // namespace cpu
}  // namespace ddp
