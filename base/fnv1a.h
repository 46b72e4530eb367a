// FNV-1a, 64 bits: a simple, dependency-free checksum, plenty to detect accidental damage (verified
// reads, io/file.h; checkpoint files) and divergence (replica desync checks). Not cryptographic.
#ifndef DDP_BASE_FNV1A_H_
#define DDP_BASE_FNV1A_H_

#include <cstddef>
#include <cstdint>

namespace ddp {

inline constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;

// Continues hash `hash` over `size` bytes at `data` (start with kFnv1a64Offset). Thread-safe (pure).
inline uint64_t Fnv1a64(const void* data, size_t size, uint64_t hash = kFnv1a64Offset) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace ddp

#endif  // DDP_BASE_FNV1A_H_
