// Note [Host staging]
// Gloo reduces and forwards host memory, so a CUDA tensor handed to ProcessGroupGloo::AllReduce or
// Broadcast (DDP's buckets and broadcasts when the model is on a GPU but the group is Gloo: two ranks on
// one GPU, where NCCL refuses to run) travels through a host copy:
//   1. Issue (caller's thread): record an event on the caller's current stream of the tensor's device.
//      The caller is not blocked; the event marks "every kernel that wrote the tensor before the call".
//   2. Worker, in issue order: poll that event (bounded by the group's timeout: a device that never
//      finishes fails the Work with a message instead of hanging the worker), copy device -> host on the
//      worker's current stream of that device (the copy waits for itself, tensor/cuda/copy.cc).
//   3. The collective runs on the host copy exactly as for a CPU tensor (same tags, same failure path).
//   4. Copy host -> device, record an event after it and poll it (same bound); only then does the Work
//      complete, so Work::Wait, and WaitStream, which is Wait for Gloo's host-side works, return with
//      the result in device memory, ordered before anything any stream enqueues afterwards.
// Cost: two copies over PCIe and a host-side reduction per collective, and the caller's stream is not
// overlapped with the copies; this is the path for tests and small jobs, NCCL is the GPU backend. The
// host copy is pageable memory (pinned memory would speed the copies up; not worth it here).
#include "comm/host_staging.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "tensor/ops.h"

#ifdef DDP_WITH_CUDA
#include "tensor/cuda/context.h"
#include "tensor/cuda/cuda_check.h"
#endif

namespace ddp {

#ifdef DDP_WITH_CUDA
namespace {

cudaEvent_t AsEvent(void* event) { return static_cast<cudaEvent_t>(event); }

// Polls `event` until it completed or `timeout` passed. `what` names the wait in the error.
absl::Status PollEvent(cudaEvent_t event, absl::Duration timeout, Device device, const char* what) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const cudaError_t state = cudaEventQuery(event);
    if (state == cudaSuccess) return absl::OkStatus();
    if (state != cudaErrorNotReady) DDP_CUDA_RETURN_IF_ERROR(state);
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("host staging: ", what, " on ", device.ToString(),
                                                      " did not finish within ", absl::FormatDuration(timeout)));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// Records a fresh event on the calling thread's current stream of `device`; stores it in *event.
absl::Status RecordOnCurrentStream(Device device, void** event) {
  cuda::DeviceGuard guard(device.index);
  cudaEvent_t created = nullptr;
  DDP_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&created, cudaEventDisableTiming));
  *event = created;  // owned by the caller from here on, even if recording fails
  DDP_CUDA_RETURN_IF_ERROR(cudaEventRecord(created, cuda::CurrentStream(device.index)));
  return absl::OkStatus();
}

}  // namespace
#endif  // DDP_WITH_CUDA

HostStaging::HostStaging(const Tensor& tensor) : tensor_(tensor), staged_(tensor.device().is_cuda()) {}

HostStaging::~HostStaging() {
#ifdef DDP_WITH_CUDA
  if (ready_ != nullptr) cudaEventDestroy(AsEvent(ready_));  // nothing to do about a failure here
#endif
}

absl::StatusOr<std::shared_ptr<HostStaging>> HostStaging::Begin(const Tensor& tensor) {
  DDP_CHECK(tensor.is_contiguous()) << "HostStaging: the tensor must be contiguous";
  std::shared_ptr<HostStaging> staging(new HostStaging(tensor));
  if (!staging->staged_) return staging;
#ifdef DDP_WITH_CUDA
  DDP_RETURN_IF_ERROR(RecordOnCurrentStream(tensor.device(), &staging->ready_));
  return staging;
#else
  DDP_CHECK(false) << "HostStaging: a tensor on " << tensor.device().ToString() << " in a build without CUDA";
  return staging;
#endif
}

absl::StatusOr<Tensor> HostStaging::CopyToHost(absl::Duration timeout) {
  if (!staged_) return tensor_;
#ifdef DDP_WITH_CUDA
  DDP_RETURN_IF_ERROR(PollEvent(AsEvent(ready_), timeout, tensor_.device(), "the caller's work on the tensor"));
  host_ = Tensor::Empty(tensor_.shape(), tensor_.dtype());
  CopyInPlace(host_, tensor_);  // waits for the copy (destination on the host)
  return host_;
#else
  return absl::InternalError("HostStaging: no CUDA in this build");
#endif
}

absl::Status HostStaging::CopyBack(absl::Duration timeout) {
  if (!staged_) return absl::OkStatus();
  DDP_CHECK(host_.defined()) << "HostStaging::CopyBack before CopyToHost";
#ifdef DDP_WITH_CUDA
  CopyInPlace(tensor_, host_);  // enqueued on this thread's current stream of the device
  const Device device = tensor_.device();
  cuda::DeviceGuard guard(device.index);
  DDP_CUDA_RETURN_IF_ERROR(cudaEventRecord(AsEvent(ready_), cuda::CurrentStream(device.index)));
  return PollEvent(AsEvent(ready_), timeout, device, "the copy of the result back to the device");
#else
  return absl::InternalError("HostStaging: no CUDA in this build");
#endif
}

}  // namespace ddp
