#include "tensor/cuda/cuda_check.h"

#include "absl/strings/str_cat.h"

namespace ddp {
namespace cuda {

absl::Status CudaErrorStatus(cudaError_t error, const char* expr, const char* file, int line) {
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", expr, ": ", cudaGetErrorName(error), " (",
                                          static_cast<int>(error), "): ", cudaGetErrorString(error)));
}

const char* CublasStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

absl::Status CudaDeviceAvailable() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device (cudaGetDeviceCount: ", cudaGetErrorName(error),
                                                      " (", static_cast<int>(error), "): ",
                                                      cudaGetErrorString(error), ")"));
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device (cudaGetDeviceCount returned 0)");
  return absl::OkStatus();
}

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace cuda
}  // namespace ddp
