// Reference-counted, device-tagged, 64-byte-aligned memory shared by tensors and their views.
#ifndef DDP_TENSOR_STORAGE_H_
#define DDP_TENSOR_STORAGE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "tensor/device.h"

namespace ddp {

// Allocates and frees raw memory for one device type. Implementations are thread-safe.
// The CPU allocator is built in; the CUDA caching allocator registers itself (--config=cuda).
class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns `nbytes` of memory on `device` (64-byte aligned), or aborts when out of memory.
  virtual void* Allocate(size_t nbytes, Device device) = 0;
  // Frees memory returned by Allocate for the same device.
  virtual void Free(void* ptr, Device device) = 0;
};

// Returns the allocator for `type`; aborts with a message if no allocator for that type is linked in
// (e.g. CUDA in a CPU-only build). Never null.
Allocator* GetAllocator(DeviceType type);

// One block of memory. Owned through std::shared_ptr (see Storage): views share it.
// Thread safety: the block itself is not synchronised; callers order their reads and writes.
class StorageImpl {
 public:
  // Allocates `nbytes` on `device` (contents uninitialised).
  StorageImpl(size_t nbytes, Device device);
  // Adopts `data` (`nbytes` on `device`, allocated elsewhere, e.g. a shared-memory heap): `release(data)`
  // is called instead of the allocator when the storage goes.
  StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> release);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // A count of the in-place ops (tensor/ops.h: AddInPlace, CopyInPlace, ...) that wrote to this block,
  // like PyTorch's version counter: a copy made of the data (Note [Autocast copies from the producer],
  // tensor/autocast.h) stays valid while the count is unchanged. Writes through data pointers do not
  // count.
  uint64_t version() const { return version_; }
  void BumpVersion() { ++version_; }

 private:
  uint64_t version_ = 0;
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::function<void(void*)> release_;  // set for adopted memory
};

using Storage = std::shared_ptr<StorageImpl>;

// Allocates a new storage of `nbytes` on `device`.
Storage NewStorage(size_t nbytes, Device device);

}  // namespace ddp

#endif  // DDP_TENSOR_STORAGE_H_
