// What the AMX probes (bench/amx_probe/*.cc) share: the tile configuration, the permission to use tile
// data, and bf16 rounding. Header-only; each probe is one g++ invocation (bench/amx_probe/run.sh).
#ifndef DDP_BENCH_AMX_PROBE_AMX_TILES_H_
#define DDP_BENCH_AMX_PROBE_AMX_TILES_H_

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace amx_probe {

// The tile configuration LDTILECFG reads (palette 1 when filled in).
struct TileConfig {
  uint8_t palette_id, start_row, reserved[14];
  uint16_t bytes_per_row[16];
  uint8_t rows[16];
};

// A palette-1 configuration with tiles 0...count - 1 of 16 rows of 64 bytes.
inline TileConfig SixteenRowTiles(int count) {
  TileConfig config = {};
  config.palette_id = 1;
  for (int t = 0; t < count; ++t) {
    config.rows[t] = 16;
    config.bytes_per_row[t] = 64;
  }
  return config;
}

// Asks Linux for the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); false when
// refused.
inline bool RequestTileData() {
  constexpr long kArchRequestPermission = 0x1023, kTileData = 18;
  return syscall(SYS_arch_prctl, kArchRequestPermission, kTileData) == 0;
}

// f rounded to bf16 (to nearest, ties to even; f finite), as its bits.
inline uint16_t ToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace amx_probe

#endif  // DDP_BENCH_AMX_PROBE_AMX_TILES_H_
