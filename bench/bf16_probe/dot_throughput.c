// Arithmetic throughput of one core's bf16 dot product (vdpbf16ps) against its float32 FMA
// (vfmadd231ps), both on 512-bit registers with 24 independent accumulators so that latency hides and
// only the issue rate counts. Prints GFLOP/s for each (a vdpbf16ps lane does 2 multiply-adds = 4 FLOP,
// an FMA lane 1 = 2 FLOP), best of --reps timings. Needs a CPU with AVX512_BF16; says so and exits 2
// without one.
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

enum { kAccumulators = 24 };
// 24 named register accumulators (an array would live in memory), enough to cover the latency of either
// instruction on two pipes. Each starts from a different value: identical chains would be folded by the
// compiler into one, and the loop would time one instruction's latency instead of the issue rate.
#define DECLARE_ACCUMULATORS \
  __m512 x0 = _mm512_set1_ps(0.f), x1 = _mm512_set1_ps(1.f), x2 = _mm512_set1_ps(2.f),                   \
         x3 = _mm512_set1_ps(3.f), x4 = _mm512_set1_ps(4.f), x5 = _mm512_set1_ps(5.f),                   \
         x6 = _mm512_set1_ps(6.f), x7 = _mm512_set1_ps(7.f), x8 = _mm512_set1_ps(8.f),                   \
         x9 = _mm512_set1_ps(9.f), x10 = _mm512_set1_ps(10.f), x11 = _mm512_set1_ps(11.f),               \
         x12 = _mm512_set1_ps(12.f), x13 = _mm512_set1_ps(13.f), x14 = _mm512_set1_ps(14.f),             \
         x15 = _mm512_set1_ps(15.f), x16 = _mm512_set1_ps(16.f), x17 = _mm512_set1_ps(17.f),             \
         x18 = _mm512_set1_ps(18.f), x19 = _mm512_set1_ps(19.f), x20 = _mm512_set1_ps(20.f),             \
         x21 = _mm512_set1_ps(21.f), x22 = _mm512_set1_ps(22.f), x23 = _mm512_set1_ps(23.f)
#define FOR_EACH_ACCUMULATOR(F) \
  F(x0); F(x1); F(x2); F(x3); F(x4); F(x5); F(x6); F(x7); F(x8); F(x9); F(x10); F(x11); F(x12); \
  F(x13); F(x14); F(x15); F(x16); F(x17); F(x18); F(x19); F(x20); F(x21); F(x22); F(x23)
// The accumulators' total, so that the compiler keeps every chain.
#define ADD_TO_TOTAL(x) total = _mm512_add_ps(total, x)
#define SUM_ACCUMULATORS                    \
  ({                                        \
    __m512 total = _mm512_setzero_ps();     \
    FOR_EACH_ACCUMULATOR(ADD_TO_TOTAL);     \
    _mm512_reduce_add_ps(total);            \
  })

__attribute__((target("avx512f,avx512bf16"))) static double Bf16Dot(long iterations) {
  DECLARE_ACCUMULATORS;
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3c00);
  const double start = Now();
  for (long n = 0; n < iterations; ++n) {
#define STEP(x) x = _mm512_dpbf16_ps(x, a, b)
    FOR_EACH_ACCUMULATOR(STEP);
#undef STEP
  }
  const double seconds = Now() - start;
  const float sink = SUM_ACCUMULATORS;
  if (sink == 12345.f) printf(" ");
  return iterations * kAccumulators * 16.0 * 4.0 / seconds * 1e-9;
}

__attribute__((target("avx512f,fma"))) static double Fp32Fma(long iterations) {
  DECLARE_ACCUMULATORS;
  const __m512 a = _mm512_set1_ps(1.0001f), b = _mm512_set1_ps(0.9999f);
  const double start = Now();
  for (long n = 0; n < iterations; ++n) {
#define STEP(x) x = _mm512_fmadd_ps(a, b, x)
    FOR_EACH_ACCUMULATOR(STEP);
#undef STEP
  }
  const double seconds = Now() - start;
  const float sink = SUM_ACCUMULATORS;
  if (sink == 12345.f) printf(" ");
  return iterations * kAccumulators * 16.0 * 2.0 / seconds * 1e-9;
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 7;
  if (reps < 1) {
    fprintf(stderr, "usage: dot_throughput [REPS >= 1]\n");
    return 2;
  }
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) {
    fprintf(stderr, "dot_throughput: this CPU has no AVX512_BF16 (vdpbf16ps); nothing to measure\n");
    return 2;
  }
  const long iterations = 20000000;
  double best_bf16 = 0, best_fp32 = 0;
  for (int r = 0; r < reps; ++r) {
    const double f = Fp32Fma(iterations), h = Bf16Dot(iterations);
    if (f > best_fp32) best_fp32 = f;
    if (h > best_bf16) best_bf16 = h;
  }
  printf("one core, %d accumulators, best of %d: vfmadd231ps zmm %.0f GFLOP/s, vdpbf16ps zmm %.0f GFLOP/s "
         "(bf16/fp32 %.2fx)\n", kAccumulators, reps, best_fp32, best_bf16, best_bf16 / best_fp32);
  return 0;
}
