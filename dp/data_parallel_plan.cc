#include "dp/data_parallel_plan.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ddp {

std::vector<int64_t> ScatterSizes(int64_t batch, int num_devices) {
  DDP_CHECK(batch >= 1) << "ScatterSizes: batch must be >= 1, got " << batch;
  DDP_CHECK(num_devices >= 1) << "ScatterSizes: num_devices must be >= 1, got " << num_devices;
  const int64_t chunks = std::min<int64_t>(batch, num_devices);
  std::vector<int64_t> sizes(chunks, batch / chunks);
  for (int64_t i = 0; i < batch % chunks; ++i) ++sizes[i];
  return sizes;
}

namespace {

// The warning for the property `value` when min / max < 0.75 (PyTorch's warn_imbalance).
std::optional<std::string> WarnImbalance(const std::vector<DeviceCapacity>& devices,
                                         const std::function<double(const DeviceCapacity&)>& value) {
  auto less = [&value](const DeviceCapacity& a, const DeviceCapacity& b) { return value(a) < value(b); };
  const auto smallest = std::min_element(devices.begin(), devices.end(), less);
  const auto largest = std::max_element(devices.begin(), devices.end(), less);
  if (value(*largest) <= 0 || value(*smallest) / value(*largest) >= 0.75) return std::nullopt;
  return absl::StrCat("There is an imbalance between your GPUs. You may want to exclude GPU ", smallest->device,
                      " which has less than 75% of the memory or cores of GPU ", largest->device,
                      ". You can do so by setting the device_ids of DataParallel, or by setting the "
                      "CUDA_VISIBLE_DEVICES environment variable.");
}

}  // namespace

std::optional<std::string> CheckDeviceBalance(const std::vector<DeviceCapacity>& devices) {
  if (devices.size() < 2) return std::nullopt;
  if (auto warning = WarnImbalance(
          devices, [](const DeviceCapacity& d) { return static_cast<double>(d.total_memory_bytes); })) {
    return warning;
  }
  return WarnImbalance(devices, [](const DeviceCapacity& d) { return static_cast<double>(d.multiprocessor_count); });
}

}  // namespace ddp
