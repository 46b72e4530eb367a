// AMX tile permission (contracts: tensor/amx_tiles.h).
#include "tensor/amx_tiles.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

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

}  // namespace cpu
}  // namespace ddp
