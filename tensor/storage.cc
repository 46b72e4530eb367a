#include "tensor/storage.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "base/check.h"
#include "base/environment_choice.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/allocator.h"
#endif

namespace ddp {
namespace {

constexpr size_t kAlignment = 64;

// Note [Huge pages for the heap]
// A training step streams through tens of activation and gradient blocks of several MiB each (ResNet-18's
// layer1 at batch 64: 12.8 MB a float32 block), far more than the TLB covers with 4 KiB pages, so the
// memory-bound passes (BatchNorm, casts, the optimizer) and the convolutions' strided reads pay page walks.
// The kernel's transparent huge pages are commonly enabled only where a program asks for them ("madvise",
// the default of Debian's kernels), and glibc's heap asks only under GLIBC_TUNABLES=glibc.malloc.hugetlb=1.
// So the allocator asks for it: whenever the heap's break has moved past what it advised, it advises the
// new part MADV_HUGEPAGE (from the 2 MiB boundary below the old end), so the first touch of each 2 MiB page
// of new heap takes one huge page. The blocks are reused from the heap step after step (Note [CPU
// allocation]), so the advice and the faults happen while the heap grows, in the first step; a step after
// that makes no system call for it. Memory the heap held before the allocator was made, and blocks served
// by mmap (512 MiB and up), keep 4 KiB pages. With it a cnn step (bench/train_throughput, one thread)
// measured ~13% faster in float32 and ~4% in bf16, a resnet18 step 1-2% (BENCHMARKS.md "Huge pages").
// DDP_CPU_HUGE_PAGES=0 in the environment turns it off (read once; 1 or unset keeps it on, any other value
// stops the process); where the kernel has no transparent huge pages or they are set to "never", the advice
// fails or does nothing, and the heap keeps 4 KiB pages.
class HeapHugePages {
 public:
  HeapHugePages() {
    enabled_ = !EnvironmentSwitch("DDP_CPU_HUGE_PAGES", "1", "0");
    floor_ = RoundUp(reinterpret_cast<uintptr_t>(sbrk(0)));
    advised_end_ = floor_;
  }

  // Advises the heap between the last advised end and the current break, if the break moved up; if it moved
  // down (glibc trimmed the heap), the end follows it, so that the heap regrown there is advised again.
  // Thread-safe.
  void AfterAllocation() {
    if (!enabled_) return;
    const uintptr_t brk = reinterpret_cast<uintptr_t>(sbrk(0));
    const uintptr_t seen = advised_end_.load(std::memory_order_relaxed);
    if (brk == seen || (brk < seen && seen == floor_)) return;
    std::lock_guard<std::mutex> lock(mu_);
    const uintptr_t advised = advised_end_.load(std::memory_order_relaxed);
    if (brk < advised) {
      advised_end_.store(std::max(brk, floor_), std::memory_order_relaxed);
      return;
    }
    if (brk == advised) return;
    const uintptr_t begin = advised & ~(kHugePageBytes - 1);
    // A hint: on failure the pages stay 4 KiB, which is correct, only slower.
    madvise(reinterpret_cast<void*>(begin), brk - begin, MADV_HUGEPAGE);
    advised_end_.store(brk, std::memory_order_relaxed);
  }

 private:
  static constexpr uintptr_t kHugePageBytes = uintptr_t{2} << 20;
  static uintptr_t RoundUp(uintptr_t address) {
    return (address + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  }

  bool enabled_ = true;
  uintptr_t floor_ = 0;  // the first 2 MiB boundary of the heap at construction: nothing below is advised
  std::mutex mu_;
  std::atomic<uintptr_t> advised_end_{0};  // the heap below it (from its first advice) is advised
};

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
    // Note [Huge pages for the heap]: the heap grows in steps of at least this much, each advised as a whole.
    mallopt(M_TOP_PAD, 32 << 20);
  }
  void* Allocate(size_t nbytes, Device) override {
    const size_t rounded = ((nbytes + kAlignment - 1) / kAlignment) * kAlignment;
    void* ptr = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    DDP_CHECK(ptr != nullptr) << "out of host memory allocating " << nbytes << " bytes";
    huge_pages_.AfterAllocation();
    return ptr;
  }
  void Free(void* ptr, Device) override { std::free(ptr); }

 private:
  HeapHugePages huge_pages_;  // made after the thresholds are set
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
