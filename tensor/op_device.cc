#include "tensor/op_device.h"

#include "tensor/device_guard.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/op_util.h"
#endif

namespace ddp {

// One CUDA input makes it a CUDA op, whose check names the CPU inputs mixed in; otherwise every input
// must be a CPU float tensor.
void RequireFloatOnOneDevice(const char* op, std::initializer_list<const Tensor*> inputs) {
#ifdef DDP_WITH_CUDA
  for (const Tensor* t : inputs) {
    if (t->defined() && t->device().is_cuda()) {
      cuda::RequireCudaFloat(op, inputs);
      return;
    }
  }
#endif
  RequireCpuFloat(op, inputs);
}

}  // namespace ddp
