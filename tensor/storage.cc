#include "tensor/storage.h"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "base/check.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/allocator.h"
#endif

namespace ddp {
namespace {

constexpr size_t kAlignment = 64;

// Note [CPU allocation]: training allocates and frees the same large activation and gradient buffers
// every step. glibc's defaults serve blocks above 128 KiB (adaptively up to 32 MiB) with fresh mmap
// calls and trim freed memory back to the OS, so every step pays page faults for memory it just gave
// back. Raising both thresholds once makes freed blocks stay in the heap and be reused, which is what a
// caching allocator would give, without one. Measured: about 10% of a cnn step (BENCHMARKS.md).
class CpuAllocator : public Allocator {
 public:
  CpuAllocator() {
    mallopt(M_MMAP_THRESHOLD, 512 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  void* Allocate(size_t nbytes, Device) override {
    const size_t rounded = ((nbytes + kAlignment - 1) / kAlignment) * kAlignment;
    void* ptr = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    DDP_CHECK(ptr != nullptr) << "out of host memory allocating " << nbytes << " bytes";
    return ptr;
  }
  void Free(void* ptr, Device) override { std::free(ptr); }
};

std::atomic<Allocator*>& AllocatorSlot(DeviceType type) {
  static std::atomic<Allocator*> cpu{nullptr};
  static std::atomic<Allocator*> cuda{nullptr};
  return type == DeviceType::kCPU ? cpu : cuda;
}

}  // namespace

Allocator* GetAllocator(DeviceType type) {
  if (type == DeviceType::kCPU) {
    static CpuAllocator cpu_allocator;
    Allocator* installed = AllocatorSlot(type).load();
    return installed != nullptr ? installed : &cpu_allocator;
  }
  Allocator* allocator = AllocatorSlot(type).load();
#ifdef DDP_WITH_CUDA
  if (allocator == nullptr) {  // the caching allocator (tensor/cuda/allocator.h), unless one was installed
    Allocator* expected = nullptr;
    AllocatorSlot(type).compare_exchange_strong(expected, cuda::CachingAllocator());
    allocator = AllocatorSlot(type).load();
  }
#endif
  DDP_CHECK(allocator != nullptr)
      << "no CUDA allocator: this binary was built without --config=cuda";
  return allocator;
}

void RegisterAllocator(DeviceType type, Allocator* allocator) { AllocatorSlot(type).store(allocator); }

StorageImpl::StorageImpl(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = GetAllocator(device.type)->Allocate(nbytes, device);
}

StorageImpl::StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> release)
    : data_(data), nbytes_(nbytes), device_(device), release_(std::move(release)) {}

StorageImpl::~StorageImpl() {
  if (data_ == nullptr) return;
  if (release_) {
    release_(data_);
  } else {
    GetAllocator(device_.type)->Free(data_, device_);
  }
}

Storage NewStorage(size_t nbytes, Device device) {
  return std::make_shared<StorageImpl>(nbytes, device);
}

}  // namespace ddp
