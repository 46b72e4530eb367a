#include "ddp/cuda_backward_timer.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "tensor/cuda/context.h"
#include "tensor/cuda/cuda_check.h"

namespace ddp {
namespace {

cudaEvent_t AsEvent(DeviceEvents::Event event) { return static_cast<cudaEvent_t>(event); }

// CUDA events of one device, recorded on the calling thread's current stream of it.
class CudaEvents : public DeviceEvents {
 public:
  explicit CudaEvents(Device device) : device_(device) {}

  absl::StatusOr<Event> Create() override {
    cuda::DeviceGuard guard(device_.index);
    cudaEvent_t event = nullptr;
    DDP_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));  // default flags: with timing
    return static_cast<Event>(event);
  }
  absl::Status Record(Event event) override {
    cuda::DeviceGuard guard(device_.index);
    DDP_CUDA_RETURN_IF_ERROR(cudaEventRecord(AsEvent(event), cuda::CurrentStream(device_.index)));
    return absl::OkStatus();
  }
  absl::StatusOr<bool> Completed(Event event) override {
    const cudaError_t state = cudaEventQuery(AsEvent(event));
    if (state == cudaErrorNotReady) return false;
    DDP_CUDA_RETURN_IF_ERROR(state);
    return true;
  }
  absl::StatusOr<double> ElapsedSeconds(Event from, Event to) override {
    float ms = 0;
    DDP_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, AsEvent(from), AsEvent(to)));
    return ms / 1e3;
  }
  void Destroy(Event event) override { cudaEventDestroy(AsEvent(event)); }  // a failure changes nothing
  std::string device_name() const override { return device_.ToString(); }

 private:
  const Device device_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceBackwardTimer>> MakeCudaBackwardTimer(Device device) {
  if (!device.is_cuda()) {
    return absl::FailedPreconditionError(
        absl::StrCat("MakeCudaBackwardTimer: times a CUDA device, not ", device.ToString()));
  }
  return std::make_unique<DeviceBackwardTimer>(std::make_unique<CudaEvents>(device));
}

}  // namespace ddp
