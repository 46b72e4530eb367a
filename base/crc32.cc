// Contracts: base/crc32.h. The folding follows Intel's "Fast CRC Computation for Generic Polynomials
// Using PCLMULQDQ Instruction" (2009) for the bit-reflected polynomial, with the 128 -> 64 -> 32 bit
// reduction and the constants that Linux's and zlib-ng's x86 implementations use:
//   k1 = x^(4*128+32) mod P, k2 = x^(4*128-32) mod P   fold 64 bytes ahead
//   k3 = x^(128+32) mod P,   k4 = x^(128-32) mod P     fold 16 bytes ahead
//   k5 = x^64 mod P                                     96 -> 64 bits
//   P' = the polynomial, mu = floor(x^64 / P)           Barrett reduction 64 -> 32 bits
// each bit-reflected and shifted left by one, as the reflected domain needs.
#include "base/crc32.h"

#include <immintrin.h>
#include <zlib.h>

namespace ddp {
namespace {

constexpr int64_t kK1 = 0x154442bd4, kK2 = 0x1c6e41596, kK3 = 0x1751997d0, kK4 = 0x0ccaa009e;
constexpr int64_t kK5 = 0x163cd6124, kPoly = 0x1db710641, kMu = 0x1f7011641;

__attribute__((target("pclmul,sse4.1"))) inline __m128i Fold(__m128i x, __m128i next, __m128i k) {
  return _mm_xor_si128(_mm_xor_si128(next, _mm_clmulepi64_si128(x, k, 0x00)),
                       _mm_clmulepi64_si128(x, k, 0x11));
}

__attribute__((target("pclmul,sse4.1"))) inline __m128i Load(const unsigned char* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// The CRC register after `size` bytes at `p`, folded. REQUIRES: size >= 64 and a multiple of 16. `state` and
// the result are the inverted register (zlib's crc ^ 0xffffffff).
__attribute__((target("pclmul,sse4.1"))) uint32_t FoldBlocks(const unsigned char* p, size_t size,
                                                             uint32_t state) {
  __m128i x0 = _mm_xor_si128(Load(p), _mm_cvtsi32_si128(static_cast<int>(state)));
  __m128i x1 = Load(p + 16), x2 = Load(p + 32), x3 = Load(p + 48);
  p += 64;
  size -= 64;
  const __m128i k1k2 = _mm_set_epi64x(kK2, kK1);
  for (; size >= 64; p += 64, size -= 64) {
    x0 = Fold(x0, Load(p), k1k2);
    x1 = Fold(x1, Load(p + 16), k1k2);
    x2 = Fold(x2, Load(p + 32), k1k2);
    x3 = Fold(x3, Load(p + 48), k1k2);
  }
  const __m128i k3k4 = _mm_set_epi64x(kK4, kK3);
  __m128i x = Fold(Fold(Fold(x0, x1, k3k4), x2, k3k4), x3, k3k4);
  for (; size >= 16; p += 16, size -= 16) x = Fold(x, Load(p), k3k4);
  // 128 -> 96 -> 64 bits.
  const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
  x = _mm_xor_si128(_mm_clmulepi64_si128(x, k3k4, 0x10), _mm_srli_si128(x, 8));
  x = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x, low32), _mm_set_epi64x(0, kK5), 0x00),
                    _mm_srli_si128(x, 4));
  // Barrett reduction to 32 bits.
  const __m128i poly_mu = _mm_set_epi64x(kMu, kPoly);
  const __m128i t1 = _mm_clmulepi64_si128(_mm_and_si128(x, low32), poly_mu, 0x10);
  const __m128i t2 = _mm_clmulepi64_si128(_mm_and_si128(t1, low32), poly_mu, 0x00);
  return static_cast<uint32_t>(_mm_extract_epi32(_mm_xor_si128(x, t2), 1));
}

bool HasCarrylessMultiply() {
  static const bool has = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return has;
}

}  // namespace

uint32_t Crc32(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  if (size >= 64 && HasCarrylessMultiply()) {
    const size_t folded = size & ~size_t{15};
    crc = ~FoldBlocks(p, folded, ~crc);
    p += folded;
    size -= folded;
  }
  return static_cast<uint32_t>(crc32_z(crc, p, size));
}

}  // namespace ddp
