// Tensor factories. All return new contiguous tensors that do not require grad.
#ifndef DDP_TENSOR_FACTORY_H_
#define DDP_TENSOR_FACTORY_H_

#include <vector>

#include "tensor/random.h"
#include "tensor/tensor.h"

namespace ddp {

Tensor Zeros(const Shape& shape, DType dtype = DType::kFloat32, Device device = Device::CPU());
Tensor Ones(const Shape& shape, DType dtype = DType::kFloat32, Device device = Device::CPU());
Tensor Full(const Shape& shape, float value, DType dtype = DType::kFloat32, Device device = Device::CPU());
// 0, 1, ..., n-1 (float32 or int64).
Tensor Arange(int64_t n, DType dtype = DType::kFloat32, Device device = Device::CPU());
// Uniform in [low, high) from `generator` (float32).
Tensor Uniform(const Shape& shape, float low, float high, Generator& generator, Device device = Device::CPU());
// Normal(mean, stddev) from `generator` (float32).
Tensor Normal(const Shape& shape, float mean, float stddev, Generator& generator, Device device = Device::CPU());
// Copies `values` into a float32 tensor of `shape`. REQUIRES: values.size() == NumElements(shape).
Tensor FromVector(const std::vector<float>& values, const Shape& shape, Device device = Device::CPU());
// Copies `values` into an int64 tensor of `shape`.
Tensor FromVector(const std::vector<int64_t>& values, const Shape& shape, Device device = Device::CPU());

}  // namespace ddp

#endif  // DDP_TENSOR_FACTORY_H_
