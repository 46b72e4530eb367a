// One thread of Intel MKL: cblas_sgemm against cblas_gemm_bf16bf16f32 (bf16 operands, float32 result and
// accumulation) on the shapes of this engine's models, GFLOP/s, best of the repetitions. MKL picks its
// kernels (AVX-512, AVX512_BF16, AMX) from the CPU at run time; MKL_VERBOSE=1 shows which.
#include <mkl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// float32 -> bf16 with round-to-nearest-even (operands here are finite).
static MKL_BF16 ToBf16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (MKL_BF16)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static void Compare(int m, int n, int k, int reps, const char* what) {
  float* a = mkl_malloc(sizeof(float) * m * k, 64);
  float* b = mkl_malloc(sizeof(float) * k * n, 64);
  float* c = mkl_malloc(sizeof(float) * m * n, 64);
  MKL_BF16* a16 = mkl_malloc(sizeof(MKL_BF16) * m * k, 64);
  MKL_BF16* b16 = mkl_malloc(sizeof(MKL_BF16) * k * n, 64);
  if (!a || !b || !c || !a16 || !b16) {
    fprintf(stderr, "mkl_gemm: out of memory at %dx%dx%d\n", m, n, k);
    exit(1);
  }
  for (long i = 0; i < (long)m * k; ++i) a16[i] = ToBf16(a[i] = (float)rand() / RAND_MAX - 0.5f);
  for (long i = 0; i < (long)k * n; ++i) b16[i] = ToBf16(b[i] = (float)rand() / RAND_MAX - 0.5f);
  double fp32 = 1e30, bf16 = 1e30;
  for (int r = 0; r < reps; ++r) {  // alternated, so that drift falls on both alike
    double t = Now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.f, a, k, b, n, 0.f, c, n);
    if ((t = Now() - t) < fp32) fp32 = t;
    t = Now();
    cblas_gemm_bf16bf16f32(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.f, a16, k, b16, n, 0.f, c, n);
    if ((t = Now() - t) < bf16) bf16 = t;
  }
  const double flop = 2.0 * m * n * k;
  printf("%5d x %5d x %5d %-26s sgemm %6.1f GFLOP/s  bf16 %6.1f GFLOP/s  bf16/fp32 %.2fx\n", m, n, k, what,
         flop / fp32 * 1e-9, flop / bf16 * 1e-9, fp32 / bf16);
  mkl_free(a), mkl_free(b), mkl_free(c), mkl_free(a16), mkl_free(b16);
}

int main(void) {
  char version[256];
  mkl_set_num_threads(1);
  mkl_get_version_string(version, sizeof version);
  printf("%s, one thread\n", version);
  Compare(2048, 2048, 2048, 5, "(square)");
  Compare(64, 512, 784, 200, "(mlp fc1, batch 64)");
  Compare(3136, 64, 576, 50, "(resnet18 layer1 conv)");
  Compare(12544, 128, 1152, 5, "(resnet18 layer2, batch 64)");
  Compare(3136, 256, 2304, 5, "(resnet18 layer3, batch 64)");
  return 0;
}
