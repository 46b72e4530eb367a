// For op implementations that exist once for both devices (tensor/ops_matmul.cc, ops_conv.cc, ...):
// the input check they share. Only their kernel calls branch on the device.
#ifndef DDP_TENSOR_OP_DEVICE_H_
#define DDP_TENSOR_OP_DEVICE_H_

#include <initializer_list>

#include "tensor/tensor.h"

namespace ddp {

// Aborts naming `op` unless every defined input is a float32 tensor and all of them live on one device:
// the CPU, or (in a --config=cuda build) one GPU. Undefined inputs (optional bias, ...) are skipped;
// `inputs` holds no null pointers. Thread-safe.
void RequireFloatOnOneDevice(const char* op, std::initializer_list<const Tensor*> inputs);

}  // namespace ddp

#endif  // DDP_TENSOR_OP_DEVICE_H_
