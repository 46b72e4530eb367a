#include "tensor/cuda/context.h"

#include <cublas_v2.h>

#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "base/environment_choice.h"
#include "tensor/cuda/cuda_check.h"

namespace ddp {
namespace cuda {
namespace {

std::unordered_map<int, cudaStream_t>& ThreadStreams() {
  thread_local std::unordered_map<int, cudaStream_t> streams;
  return streams;
}

bool UseTf32() {
  static const bool tf32 = EnvironmentSwitch("DDP_CUDA_TF32", "0", "1");
  return tf32;
}

// One cuBLAS handle per device and thread (handles are not safe to share across threads with
// different streams). Leaked at thread exit on purpose: destroying after the driver shut down aborts.
cublasHandle_t Handle(int device) {
  thread_local std::unordered_map<int, cublasHandle_t> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasHandle_t handle = nullptr;
  DDP_CUBLAS_CHECK(cublasCreate(&handle));
  DDP_CUBLAS_CHECK(cublasSetMathMode(handle, UseTf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  handles.emplace(device, handle);
  return handle;
}

}  // namespace

cudaStream_t CurrentStream(int device) {
  auto& streams = ThreadStreams();
  auto it = streams.find(device);
  return it == streams.end() ? nullptr : it->second;
}

void SetCurrentStream(int device, cudaStream_t stream) { ThreadStreams()[device] = stream; }

DeviceGuard::DeviceGuard(int device) {
  DDP_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) DDP_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

void Gemm(int device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  DeviceGuard guard(device);
  cublasHandle_t handle = Handle(device);
  DDP_CUBLAS_CHECK(cublasSetStream(handle, CurrentStream(device)));
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: a row-major matrix with row stride
  // ld is the column-major transpose with leading dimension ld, so swap the operands and keep the flags.
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  DDP_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX) << "Gemm dimensions exceed cuBLAS's int range";
  DDP_CUBLAS_CHECK(cublasSgemm(handle, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                               &alpha, b, static_cast<int>(ldb), a, static_cast<int>(lda), &beta, c,
                               static_cast<int>(ldc)));
}

void GemmLowPrecision(int device, DType operands, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, const void* a, int64_t lda, const void* b, int64_t ldb, float beta, float* c,
                      int64_t ldc) {
  DDP_CHECK(operands == DType::kBFloat16 || operands == DType::kFloat16)
      << "GemmLowPrecision: operands must be bfloat16 or float16, got " << DTypeName(operands);
  if (m == 0 || n == 0) return;
  DeviceGuard guard(device);
  if (k == 0) {  // cuBLAS rejects k = 0; C = beta * C with beta 0 or 1, the only values the ops pass
    DDP_CHECK(beta == 0.0f || beta == 1.0f) << "GemmLowPrecision: k = 0 with beta " << beta;
    if (beta == 0.0f) {
      DDP_CUDA_CHECK(cudaMemset2DAsync(c, static_cast<size_t>(ldc) * sizeof(float), 0, static_cast<size_t>(n) * sizeof(float),
                                       static_cast<size_t>(m), CurrentStream(device)));
    }
    return;
  }
  cublasHandle_t handle = Handle(device);
  DDP_CUBLAS_CHECK(cublasSetStream(handle, CurrentStream(device)));
  // Row-major as column-major with the operands swapped (see Gemm).
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cudaDataType_t type = operands == DType::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  DDP_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX) << "Gemm dimensions exceed cuBLAS's int range";
  DDP_CUBLAS_CHECK(cublasGemmEx(handle, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                &alpha, b, type, static_cast<int>(ldb), a, type, static_cast<int>(lda), &beta, c,
                                CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace cuda
}  // namespace ddp
