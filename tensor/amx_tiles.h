// What the engine's AMX kernels share (tensor/conv_amx.cc, tensor/conv_amx_weight_gradient.cc,
// tensor/conv_amx_grid_forward.cc, tensor/amx_matmul_order.cc): the tile configuration LDTILECFG reads
// and the 2x2 one the convolution kernels load, the permission to use tile data, 64-byte aligned scratch and
// zero-padded images. Internal to the tensor floor.
#ifndef DDP_TENSOR_AMX_TILES_H_
#define DDP_TENSOR_AMX_TILES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

// The tile configuration LDTILECFG reads (palette 1); tiles whose rows stay 0 are unused.
struct AmxTileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// True when this CPU has AMX-BF16 and Linux grants the process the AMX tile state (ARCH_REQ_XCOMP_PERM,
// asked once per process). Thread-safe.
bool AmxTileDataGranted();

// The configuration of a 2x2 block of TDPBF16PS products, every tile row 64 bytes: tiles 0-1 accumulate the
// first A operand (`rows0` rows, in tile 4) against the two B operands (tiles 6 and 7, 16 rows: 16 K pairs
// x 16 columns), tiles 2-3 the second (`rows1` rows, in tile 5). REQUIRES: 1 <= rows0, rows1 <= 16.
AmxTileConfig TwoByTwoTileConfig(int64_t rows0, int64_t rows1);

// The 2x2 configuration a thread has loaded, for a kernel that loads it only when its rows change (a
// configuration load costs several hundred cycles) and releases the tiles once at the end.
struct LoadedTileConfig {
  int64_t rows0 = -1, rows1 = -1;  // -1: none loaded
};

// Loads TwoByTwoTileConfig(rows0, rows1) on the calling thread unless `loaded` says it is the one loaded;
// updates `loaded`.
void LoadTwoByTwoTileConfig(int64_t rows0, int64_t rows1, LoadedTileConfig& loaded);

// Releases the calling thread's tiles if `loaded` says a configuration is loaded, and marks none loaded.
void ReleaseTiles(LoadedTileConfig& loaded);

// `elements` values in `buffer` (grown as needed, kept across calls), starting on a 64-byte boundary: a
// tile row of 64 bytes then lies in one cache line (unaligned, every tile load touches twice the lines,
// which measured 2-3x slower).
template <typename T>
T* AlignedScratch(std::vector<T>& buffer, int64_t elements) {
  constexpr size_t kLine = 64, kSlack = kLine / sizeof(T);
  if (buffer.size() < static_cast<size_t>(elements) + kSlack)
    buffer.resize(static_cast<size_t>(elements) + kSlack);
  const uintptr_t address = reinterpret_cast<uintptr_t>(buffer.data());
  return buffer.data() + ((kLine - address % kLine) % kLine) / sizeof(T);
}

// One image [rows, cols, channels] (channels-last) into `padded` [(rows + 2), (cols + 2), channels] with a
// border of zeros: the top and bottom rows and each row's first and last pixel are zeroed, the rest is
// copied once.
void PadImage(const BFloat16* image, int64_t rows, int64_t cols, int64_t channels, BFloat16* padded);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_AMX_TILES_H_
