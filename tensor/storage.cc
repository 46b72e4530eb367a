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
// caching allocator would give, without one: about a tenth of a cnn step.
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

}  // namespace

Allocator* GetAllocator(DeviceType type) {
  if (type == DeviceType::kCPU) {
    static CpuAllocator cpu_allocator;
    return &cpu_allocator;
  }
#ifdef DDP_WITH_CUDA
  return cuda::CachingAllocator();  // tensor/cuda/allocator.h
#else
  DDP_CHECK(false) << "no CUDA allocator: this binary was built without --config=cuda";
  return nullptr;
#endif
}

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
