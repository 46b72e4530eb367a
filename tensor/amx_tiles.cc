// AMX tile permission, tile configurations and padded images (contracts: tensor/amx_tiles.h).
#include "tensor/amx_tiles.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace ddp {
namespace cpu {
namespace {

bool CpuHasAmxBf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  const unsigned amx_bf16 = 1u << 22, amx_tile = 1u << 24;
  return (edx & amx_bf16) != 0 && (edx & amx_tile) != 0;
}

}  // namespace

bool AmxTileDataGranted() {
  static const bool granted = [] {
    constexpr long kArchRequestPermission = 0x1023, kTileData = 18;
    return CpuHasAmxBf16() && syscall(SYS_arch_prctl, kArchRequestPermission, kTileData) == 0;
  }();
  return granted;
}

AmxTileConfig TwoByTwoTileConfig(int64_t rows0, int64_t rows1) {
  constexpr int64_t kBRows = 16;
  AmxTileConfig config;
  const int64_t rows[8] = {rows0, rows0, rows1, rows1, rows0, rows1, kBRows, kBRows};
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = static_cast<uint8_t>(rows[t]);
    config.bytes_per_row[t] = 64;
  }
  return config;
}

__attribute__((target("amx-tile"))) void LoadTwoByTwoTileConfig(int64_t rows0, int64_t rows1,
                                                                LoadedTileConfig& loaded) {
  if (rows0 == loaded.rows0 && rows1 == loaded.rows1) return;
  const AmxTileConfig config = TwoByTwoTileConfig(rows0, rows1);
  _tile_loadconfig(&config);
  loaded = {rows0, rows1};
}

__attribute__((target("amx-tile"))) void ReleaseTiles(LoadedTileConfig& loaded) {
  if (loaded.rows0 < 0) return;
  _tile_release();
  loaded = {};
}

void PadImage(const BFloat16* image, int64_t rows, int64_t cols, int64_t channels, BFloat16* padded) {
  const int64_t row = (cols + 2) * channels;
  std::memset(static_cast<void*>(padded), 0, sizeof(BFloat16) * row);
  std::memset(static_cast<void*>(padded + (rows + 1) * row), 0, sizeof(BFloat16) * row);
  for (int64_t y = 0; y < rows; ++y) {
    BFloat16* dst = padded + (y + 1) * row;
    std::memset(static_cast<void*>(dst), 0, sizeof(BFloat16) * channels);
    std::memcpy(static_cast<void*>(dst + channels), image + y * cols * channels,
                sizeof(BFloat16) * cols * channels);
    std::memset(static_cast<void*>(dst + (cols + 1) * channels), 0, sizeof(BFloat16) * channels);
  }
}

}  // namespace cpu
}  // namespace ddp
