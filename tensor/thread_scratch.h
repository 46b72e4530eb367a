// Per-thread scratch arrays for CPU kernels, reused across calls so that steady-state training allocates
// (and page-faults) nothing in its kernels. Internal to the tensor floor.
#ifndef DDP_TENSOR_THREAD_SCRATCH_H_
#define DDP_TENSOR_THREAD_SCRATCH_H_

#include <cstdint>
#include <vector>

namespace ddp {
namespace cpu {

// The calling thread's buffer `slot` (< kSlots) of `Owner`, grown to at least `elements` elements of T. Its
// contents are unspecified; it stays valid until this thread asks for the same Owner, T and slot again.
// Distinct Owners (usually an empty tag struct in the caller's file) never share buffers.
template <typename Owner, typename T, int kSlots>
T* ThreadScratch(int slot, int64_t elements) {
  thread_local std::vector<T> buffers[kSlots];
  std::vector<T>& buffer = buffers[slot];
  if (static_cast<int64_t>(buffer.size()) < elements) buffer.resize(elements);
  return buffer.data();
}

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_THREAD_SCRATCH_H_
