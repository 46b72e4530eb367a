// The pure decisions of DataParallel (dp/data_parallel.h), kept apart so they are tested without
// threads or devices: how a batch is split over devices, and whether a set of GPUs is too unbalanced
// to drive together.
#ifndef DDP_DP_DATA_PARALLEL_PLAN_H_
#define DDP_DP_DATA_PARALLEL_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddp {

// The chunk sizes DataParallel scatters a batch of `batch` samples into over `num_devices` devices:
// min(batch, num_devices) chunks (never an empty one: a batch smaller than the device count uses fewer
// replicas), sizes differing by at most one, larger chunks first. E.g. (10, 4) -> {3, 3, 2, 2};
// (3, 4) -> {1, 1, 1}. Balanced rather than torch.chunk's ceil-sized chunks ((5, 4) gives {2, 1, 1, 1}
// here, {2, 2, 1} in PyTorch), so every device gets work whenever batch >= num_devices.
// REQUIRES: batch >= 1 and num_devices >= 1 (checked).
std::vector<int64_t> ScatterSizes(int64_t batch, int num_devices);

// What the balance check knows about one GPU (cudaDeviceProp's totalGlobalMem, multiProcessorCount).
struct DeviceCapacity {
  int device = 0;                   // CUDA ordinal
  int64_t total_memory_bytes = 0;   // device memory
  int multiprocessor_count = 0;     // streaming multiprocessors ("cores" in PyTorch's message)
};

// PyTorch's DataParallel._check_balance: when the smallest device has less than 75% of the largest
// one's memory, or else of its multiprocessors, returns the warning naming both devices (the slowest
// device sets the pace of every step); std::nullopt when balanced or with fewer than two devices.
// Pure: the caller queries the devices and prints the warning.
std::optional<std::string> CheckDeviceBalance(const std::vector<DeviceCapacity>& devices);

}  // namespace ddp

#endif  // DDP_DP_DATA_PARALLEL_PLAN_H_
