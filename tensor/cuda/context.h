// Per-thread CUDA state the ops use: the current stream of each device, a device guard, and GEMM through
// cuBLAS. Only built with --config=cuda.
//
// Note [Current stream]: every CUDA op enqueues its kernels on CurrentStream(device) of the calling
// thread, which is the legacy default stream (0) unless SetCurrentStream changed it. Ops never
// synchronise the host except to return a value to it (item(), ToVector, copies to the CPU). The
// caching allocator (tensor/cuda/allocator.h) reuses freed blocks without waiting, which is safe because
// a block's previous users and its next user run on the same stream in issue order; memory used on
// another stream (NCCL's communication stream) is kept alive by the Work until it completed.
#ifndef DDP_TENSOR_CUDA_CONTEXT_H_
#define DDP_TENSOR_CUDA_CONTEXT_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace ddp {
namespace cuda {

// The calling thread's current stream for `device` (default: the legacy default stream 0).
cudaStream_t CurrentStream(int device);
// Makes `stream` the calling thread's current stream for `device` (not owned).
void SetCurrentStream(int device, cudaStream_t stream);

// Makes `device` current for the scope, restoring the previous device after. Aborts on CUDA errors.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Row-major C[m, n] = alpha * op(A) op(B) + beta * C on `device`'s current stream through cuBLAS, with
// the same contract as cpu::Gemm (tensor/cpu_gemm.h). FP32 math unless DDP_CUDA_TF32=1 is set in the
// environment (TF32 tensor cores; about 1e-3 relative error, as PyTorch's allow_tf32).
void Gemm(int device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same product with 16-bit float operands, for autocast (tensor/autocast.h): A and B hold `operands`
// (kBFloat16 or kFloat16) elements, C is float32, and cuBLAS multiplies with float32 accumulation
// (cublasGemmEx, CUBLAS_COMPUTE_32F: tensor cores; the products of two 16-bit values are exact in float32,
// so results differ from a float32 GEMM of the same rounded values only in summation order).
// k == 0 gives beta * C. REQUIRES: operands is kBFloat16 or kFloat16 (checked).
void GemmLowPrecision(int device, DType operands, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, const void* a, int64_t lda, const void* b, int64_t ldb, float beta, float* c,
                      int64_t ldc);

}  // namespace cuda
}  // namespace ddp

#endif  // DDP_TENSOR_CUDA_CONTEXT_H_
