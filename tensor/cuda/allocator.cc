#include "tensor/cuda/allocator.h"

#include <cuda_runtime_api.h>

#include <map>
#include <unordered_map>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "tensor/cuda/context.h"
#include "tensor/cuda/cuda_check.h"

namespace ddp {
namespace cuda {
namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t{2} << 20;

size_t RoundSize(size_t nbytes) {
  if (nbytes == 0) nbytes = 1;
  const size_t unit = nbytes < kSmallLimit ? kSmallRound : kLargeRound;
  return (nbytes + unit - 1) / unit * unit;
}

struct DeviceCache {
  std::multimap<size_t, void*> free_blocks;       // rounded size -> block
  std::unordered_map<void*, size_t> live_blocks;  // block -> rounded size
  MemoryStats stats;
};

class CudaCachingAllocator : public Allocator {
 public:
  void* Allocate(size_t nbytes, Device device) override {
    const size_t size = RoundSize(nbytes);
    absl::MutexLock lock(&mu_);
    DeviceCache& cache = caches_[device.index];
    auto it = cache.free_blocks.lower_bound(size);
    const size_t limit = size < kSmallLimit ? 2 * size : size;  // large blocks: exact class only
    if (it != cache.free_blocks.end() && it->first <= limit) {
      void* ptr = it->second;
      const size_t block = it->first;
      cache.free_blocks.erase(it);
      cache.stats.cached_bytes -= block;
      cache.stats.cache_hits++;
      Track(cache, ptr, block);
      return ptr;
    }
    DeviceGuard guard(device.index);
    void* ptr = nullptr;
    cudaError_t error = cudaMalloc(&ptr, size);
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      ReleaseCache(device.index, cache);
      error = cudaMalloc(&ptr, size);
    }
    DDP_CHECK(error == cudaSuccess) << "CUDA out of memory allocating " << nbytes << " bytes on cuda:"
                                    << device.index << " (" << cudaGetErrorName(error) << "); "
                                    << MemoryStatsToString(cache.stats);
    cache.stats.cuda_malloc_calls++;
    Track(cache, ptr, size);
    return ptr;
  }

  void Free(void* ptr, Device device) override {
    absl::MutexLock lock(&mu_);
    DeviceCache& cache = caches_[device.index];
    auto it = cache.live_blocks.find(ptr);
    DDP_CHECK(it != cache.live_blocks.end()) << "CUDA free of a pointer this allocator did not hand out";
    const size_t size = it->second;
    cache.live_blocks.erase(it);
    cache.stats.allocated_bytes -= size;
    cache.stats.cached_bytes += size;
    cache.free_blocks.emplace(size, ptr);
  }

  MemoryStats Stats(int device) {
    absl::MutexLock lock(&mu_);
    return caches_[device].stats;
  }

  void EmptyAll() {
    absl::MutexLock lock(&mu_);
    for (auto& [device, cache] : caches_) ReleaseCache(device, cache);
  }

 private:
  static void Track(DeviceCache& cache, void* ptr, size_t size) {
    cache.live_blocks.emplace(ptr, size);
    cache.stats.allocated_bytes += size;
    if (cache.stats.allocated_bytes > cache.stats.peak_allocated_bytes) {
      cache.stats.peak_allocated_bytes = cache.stats.allocated_bytes;
    }
  }

  // Frees every cached block of `device`, after the device finished all work that may still use them.
  static void ReleaseCache(int device, DeviceCache& cache) {
    if (cache.free_blocks.empty()) return;
    DeviceGuard guard(device);
    DDP_CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& [size, ptr] : cache.free_blocks) DDP_CUDA_CHECK(cudaFree(ptr));
    cache.free_blocks.clear();
    cache.stats.cached_bytes = 0;
  }

  absl::Mutex mu_;
  std::map<int, DeviceCache> caches_ ABSL_GUARDED_BY(mu_);
};

CudaCachingAllocator& Instance() {
  static auto* allocator = new CudaCachingAllocator();  // never destroyed (used until exit)
  return *allocator;
}

}  // namespace

Allocator* CachingAllocator() { return &Instance(); }

MemoryStats GetMemoryStats(int device) { return Instance().Stats(device); }

std::string MemoryStatsToString(const MemoryStats& s) {
  const double mib = 1024.0 * 1024.0;
  return absl::StrFormat("allocated %.1f MiB, cached %.1f MiB, peak %.1f MiB, %d cudaMalloc calls, %d cache hits",
                         s.allocated_bytes / mib, s.cached_bytes / mib, s.peak_allocated_bytes / mib,
                         s.cuda_malloc_calls, s.cache_hits);
}


}  // namespace cuda
}  // namespace ddp
