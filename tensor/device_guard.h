// For op implementations: checks that an op's inputs live where its kernels can run.
#ifndef DDP_TENSOR_DEVICE_GUARD_H_
#define DDP_TENSOR_DEVICE_GUARD_H_

#include "tensor/tensor.h"

namespace ddp {

// Aborts naming `op` unless every defined input is a float32 CPU tensor. CUDA kernels dispatch before
// this check when --config=cuda links them (tensor/cuda/).
inline void RequireCpuFloat(const char* op, std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs) {
    if (t == nullptr || !t->defined()) continue;
    DDP_CHECK(t->device().is_cpu()) << op << ": input on " << t->device().ToString()
                                    << " but this build has no CUDA kernel for it";
    DDP_CHECK(t->dtype() == DType::kFloat32) << op << ": expects float32, got " << DTypeName(t->dtype());
  }
}

}  // namespace ddp

#endif  // DDP_TENSOR_DEVICE_GUARD_H_
