// Single-precision GEMM on the CPU through oneDNN's dnnl_sgemm, which picks its kernels from the CPU's
// instruction sets (AVX-512 / AVX2) at run time; Debian's OpenBLAS 0.3.21 falls back to a generic kernel
// on CPUs it does not recognise (several times slower than dnnl_sgemm on one core), so the choice holds
// on any x86 CPU.
#ifndef DDP_TENSOR_CPU_GEMM_H_
#define DDP_TENSOR_CPU_GEMM_H_

#include <cstdint>

namespace ddp {
namespace cpu {

// Row-major C[m, n] = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T (trans_a / trans_b).
// lda/ldb/ldc are row strides of A, B, C as stored. Thread count: SetNumThreads (tensor/threads.h).
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CPU_GEMM_H_
