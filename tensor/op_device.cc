#include "tensor/op_device.h"

#ifdef DDP_WITH_CUDA
#include "tensor/cuda/op_util.h"
#endif

namespace ddp {
namespace {

// Aborts naming `op` unless every defined input is a float32 CPU tensor.
void RequireCpuFloat(const char* op, std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs) {
    if (!t->defined()) continue;
    DDP_CHECK(t->device().is_cpu()) << op << ": input on " << t->device().ToString()
                                    << " but this build has no CUDA kernel for it";
    DDP_CHECK(t->dtype() == DType::kFloat32) << op << ": expects float32, got " << DTypeName(t->dtype());
  }
}

}  // namespace

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
