#include "tensor/factory.h"

#include <cstring>

#include "tensor/ops.h"

namespace ddp {
namespace {

// Builds on the CPU, then moves to `device`.
Tensor OnDevice(const Tensor& host, Device device) { return ToDevice(host, device); }

}  // namespace

Tensor Zeros(const Shape& shape, DType dtype, Device device) { return Full(shape, 0.0f, dtype, device); }

Tensor Ones(const Shape& shape, DType dtype, Device device) { return Full(shape, 1.0f, dtype, device); }

Tensor Full(const Shape& shape, float value, DType dtype, Device device) {
  Tensor host = Tensor::Empty(shape, DType::kFloat32);
  FillInPlace(host, value);
  return OnDevice(ToDType(host, dtype), device);
}

Tensor Arange(int64_t n, DType dtype, Device device) {
  Tensor host = Tensor::Empty({n}, DType::kInt64);
  for (int64_t i = 0; i < n; ++i) host.data<int64_t>()[i] = i;
  return OnDevice(ToDType(host, dtype), device);
}

Tensor Uniform(const Shape& shape, float low, float high, Generator& generator, Device device) {
  Tensor host = Tensor::Empty(shape);
  float* p = host.data<float>();
  const int64_t n = host.numel();  // hoisted: the stores through p could alias the shape it reads
  for (int64_t i = 0; i < n; ++i) p[i] = generator.Uniform(low, high);
  return OnDevice(host, device);
}

Tensor Normal(const Shape& shape, float mean, float stddev, Generator& generator, Device device) {
  Tensor host = Tensor::Empty(shape);
  float* p = host.data<float>();
  const int64_t n = host.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = generator.Normal(mean, stddev);
  return OnDevice(host, device);
}

Tensor FromVector(const std::vector<float>& values, const Shape& shape, Device device) {
  DDP_CHECK(static_cast<int64_t>(values.size()) == NumElements(shape))
      << values.size() << " values for shape " << ShapeToString(shape);
  Tensor host = Tensor::Empty(shape);
  std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(float));
  return OnDevice(host, device);
}

Tensor FromVector(const std::vector<int64_t>& values, const Shape& shape, Device device) {
  DDP_CHECK(static_cast<int64_t>(values.size()) == NumElements(shape))
      << values.size() << " values for shape " << ShapeToString(shape);
  Tensor host = Tensor::Empty(shape, DType::kInt64);
  std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(int64_t));
  return OnDevice(host, device);
}

}  // namespace ddp
