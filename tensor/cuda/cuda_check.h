// Error handling for CUDA and cuBLAS calls (the engine's error policy, base/check.h): every call goes
// through one of these macros, which record the call, file and line.
//   DDP_CUDA_CHECK(expr)          aborts with the CUDA error's name and message (broken invariants:
//                                 kernel launches, copies inside ops).
//   DDP_CUDA_RETURN_IF_ERROR(expr) returns an absl::Status from the enclosing function (what can fail
//                                 at run time: device discovery, streams and events in comm/).
//   DDP_CUBLAS_CHECK(expr)        aborts with the cuBLAS status.
// Only built with --config=cuda.
#ifndef DDP_TENSOR_CUDA_CUDA_CHECK_H_
#define DDP_TENSOR_CUDA_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "base/check.h"

namespace ddp {
namespace cuda {

// An Internal status "file:line: expr: cudaErrorName (code): message".
absl::Status CudaErrorStatus(cudaError_t error, const char* expr, const char* file, int line);
// "CUBLAS_STATUS_..." for a cuBLAS status.
const char* CublasStatusName(cublasStatus_t status);

// OK when at least one CUDA device is usable; otherwise FailedPrecondition "no CUDA device (...)"
// naming cudaGetDeviceCount's error (e.g. cudaErrorInsufficientDriver (35) on machines without a GPU).
absl::Status CudaDeviceAvailable();
// The number of usable CUDA devices (0 when the driver or devices are missing).
int CudaDeviceCount();

}  // namespace cuda
}  // namespace ddp

#define DDP_CUDA_CHECK(expr)                                                                       \
  do {                                                                                             \
    const cudaError_t ddp_cuda_error_ = (expr);                                                    \
    DDP_CHECK(ddp_cuda_error_ == cudaSuccess)                                                      \
        << #expr << ": " << cudaGetErrorName(ddp_cuda_error_) << " (" << static_cast<int>(ddp_cuda_error_) \
        << "): " << cudaGetErrorString(ddp_cuda_error_);                                           \
  } while (0)

#define DDP_CUDA_RETURN_IF_ERROR(expr)                                                       \
  do {                                                                                       \
    const cudaError_t ddp_cuda_error_ = (expr);                                              \
    if (ddp_cuda_error_ != cudaSuccess) {                                                    \
      return ::ddp::cuda::CudaErrorStatus(ddp_cuda_error_, #expr, __FILE__, __LINE__);       \
    }                                                                                        \
  } while (0)

#define DDP_CUBLAS_CHECK(expr)                                                                \
  do {                                                                                        \
    const cublasStatus_t ddp_cublas_status_ = (expr);                                         \
    DDP_CHECK(ddp_cublas_status_ == CUBLAS_STATUS_SUCCESS)                                    \
        << #expr << ": " << ::ddp::cuda::CublasStatusName(ddp_cublas_status_);                \
  } while (0)

#endif  // DDP_TENSOR_CUDA_CUDA_CHECK_H_
