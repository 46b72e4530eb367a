// The CUDA events of DeviceBackwardTimer (ddp/device_backward_timer.h): timing events recorded on the
// calling thread's current stream of one GPU. Only built with --config=cuda.
#ifndef DDP_DDP_CUDA_BACKWARD_TIMER_H_
#define DDP_DDP_CUDA_BACKWARD_TIMER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "ddp/device_backward_timer.h"
#include "tensor/device.h"

namespace ddp {

// A DeviceBackwardTimer whose events are CUDA events (with timing) recorded on the current stream of
// `device` of the thread that calls the timer (Note [Current stream] in tensor/cuda/context.h): attach it
// to the DDP module of the training thread. Errors: FailedPrecondition when `device` is not a CUDA device.
absl::StatusOr<std::unique_ptr<DeviceBackwardTimer>> MakeCudaBackwardTimer(Device device);

}  // namespace ddp

#endif  // DDP_DDP_CUDA_BACKWARD_TIMER_H_
