// The caching CUDA allocator, installed for DeviceType::kCUDA (tensor/storage.h) the first time a CUDA
// storage is allocated. Only built with --config=cuda.
//
// Freed blocks go to a per-device free list keyed by their rounded size (512-byte classes below 1 MiB,
// 2 MiB classes above) and are handed out again for requests of the same class (or up to twice the
// size for small blocks), so a training loop calls cudaMalloc only in its first steps. When cudaMalloc
// fails the cache of that device is released (cudaFree after a device synchronisation) and the call
// retried once; a second failure aborts with the device's memory statistics. Reuse without
// synchronisation is safe under Note [Current stream] (tensor/cuda/context.h). Thread-safe.
#ifndef DDP_TENSOR_CUDA_ALLOCATOR_H_
#define DDP_TENSOR_CUDA_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/storage.h"

namespace ddp {
namespace cuda {

struct MemoryStats {
  size_t allocated_bytes = 0;       // held by live storages (rounded sizes)
  size_t cached_bytes = 0;          // freed, kept for reuse
  size_t peak_allocated_bytes = 0;  // maximum of allocated_bytes so far
  int64_t cuda_malloc_calls = 0;    // cudaMalloc calls so far (flat once the cache is warm)
  int64_t cache_hits = 0;           // allocations served from the cache
};

// The process-wide allocator (never destroyed). Never null.
Allocator* CachingAllocator();
// Statistics of `device`.
MemoryStats GetMemoryStats(int device);
// "allocated 12.0 MiB, cached 4.0 MiB, peak 16.0 MiB, 7 cudaMalloc calls, 120 cache hits".
std::string MemoryStatsToString(const MemoryStats& stats);

}  // namespace cuda
}  // namespace ddp

#endif  // DDP_TENSOR_CUDA_ALLOCATOR_H_
