// CRC-32 as ZIP, gzip and zlib define it (polynomial 0x04C11DB7, reflected), the checksum of every
// member of a ZIP archive (io/zip_archive.h). On CPUs with carry-less multiplication (PCLMULQDQ, every
// x86-64 CPU since 2010) it folds 64 bytes at a time with it, ~10x zlib's table-driven crc32; elsewhere,
// and for the last bytes, it is zlib's.
#ifndef DDP_BASE_CRC32_H_
#define DDP_BASE_CRC32_H_

#include <cstddef>
#include <cstdint>

namespace ddp {

// The CRC-32 of `size` bytes at `data` continued from `crc`, the CRC-32 of the bytes before them (0 for
// none): Crc32(b, nb, Crc32(a, na)) == Crc32(a + b) and equals zlib's crc32(crc, data, size).
// Thread-safe (pure).
uint32_t Crc32(const void* data, size_t size, uint32_t crc = 0);

}  // namespace ddp

#endif  // DDP_BASE_CRC32_H_
