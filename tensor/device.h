// Where a tensor's memory lives.
#ifndef DDP_TENSOR_DEVICE_H_
#define DDP_TENSOR_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"

namespace ddp {

enum class DeviceType : uint8_t { kCPU, kCUDA };

// A device: the CPU, or one CUDA GPU by index. Value type, cheap to copy.
struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // GPU ordinal for kCUDA; always 0 for kCPU.

  static Device CPU() { return Device{DeviceType::kCPU, 0}; }
  static Device CUDA(int index) { return Device{DeviceType::kCUDA, index}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device& other) const { return type == other.type && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
  // "cpu" or "cuda:N", as PyTorch prints devices.
  std::string ToString() const;
};

}  // namespace ddp

#endif  // DDP_TENSOR_DEVICE_H_
