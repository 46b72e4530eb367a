// Arithmetic throughput of one core's bf16 dot product (vdpbf16ps) against its float32 FMA
// (vfmadd231ps), both on 512-bit registers with 12 independent accumulators so that latency hides and
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

enum { kAccumulators = 12 };
// Twelve named register accumulators (an array would live in memory).
#define DECLARE_ACCUMULATORS                                                                          \
  __m512 x0 = _mm512_setzero_ps(), x1 = x0, x2 = x0, x3 = x0, x4 = x0, x5 = x0, x6 = x0, x7 = x0, x8 = x0, \
         x9 = x0, x10 = x0, x11 = x0
#define FOR_EACH_ACCUMULATOR(F) \
  F(x0); F(x1); F(x2); F(x3); F(x4); F(x5); F(x6); F(x7); F(x8); F(x9); F(x10); F(x11)
#define SUM_ACCUMULATORS                                                                               \
  _mm512_reduce_add_ps(_mm512_add_ps(                                                                  \
      _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x0, x1), _mm512_add_ps(x2, x3)),                       \
                    _mm512_add_ps(_mm512_add_ps(x4, x5), _mm512_add_ps(x6, x7))),                      \
      _mm512_add_ps(_mm512_add_ps(x8, x9), _mm512_add_ps(x10, x11))))

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
  printf("one core, 12 accumulators, best of %d: vfmadd231ps zmm %.0f GFLOP/s, vdpbf16ps zmm %.0f GFLOP/s "
         "(bf16/fp32 %.2fx)\n", reps, best_fp32, best_bf16, best_bf16 / best_fp32);
  return 0;
}
