#include "tensor/half_convert.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "tensor/low_precision_round.h"

namespace ddp {
namespace cpu {

// F16C rounds to nearest, ties to even, with gradual underflow and overflow to inf, as RoundToHalf; a
// NaN keeps the top of its payload there, where RoundToHalf gives sign | 0x7e00. Widening is exact both
// ways, but F16C quiets a signalling NaN, where HalfToFloat32 keeps the payload as it is. Both NaN cases
// are patched lane by lane, so the arrays hold the functors' bits.
void FloatToHalfRun(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), infinity = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet_nan = _mm256_set1_epi32(0x7e00), sign = _mm256_set1_epi32(0x8000);
  for (; i + 8 <= n; i += 8) {
    const __m256 value = _mm256_loadu_ps(src + i);
    const __m128i half = _mm256_cvtps_ph(value, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i bits = _mm256_castps_si256(value);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, magnitude), infinity);
    const __m256i canonical = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(bits, 16), sign), quiet_nan);
    // Narrow the 32-bit lanes to 16 bits (the values fit; the masks stay all ones or zero).
    const __m128i canonical16 =
        _mm_packus_epi32(_mm256_castsi256_si128(canonical), _mm256_extracti128_si256(canonical, 1));
    const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_blendv_epi8(half, canonical16, nan16));
  }
#endif
  const functors::RoundToHalf round;
  for (; i < n; ++i) dst[i] = round(src[i]);
}

void HalfToFloatRun(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  const __m256i exponent = _mm256_set1_epi32(0x7c00), mantissa = _mm256_set1_epi32(0x3ff);
  const __m256i sign = _mm256_set1_epi32(0x8000), infinity = _mm256_set1_epi32(0x7f800000);
  for (; i + 8 <= n; i += 8) {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256 wide = _mm256_cvtph_ps(half);
    const __m256i bits = _mm256_cvtepu16_epi32(half);
    const __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(bits, exponent), exponent);  // inf or NaN
    const __m256i exact =
        _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(bits, sign), 16), infinity),
                        _mm256_slli_epi32(_mm256_and_si256(bits, mantissa), 13));
    _mm256_storeu_ps(dst + i,
                     _mm256_blendv_ps(wide, _mm256_castsi256_ps(exact), _mm256_castsi256_ps(special)));
  }
#endif
  const functors::HalfToFloat32 widen;
  for (; i < n; ++i) dst[i] = widen(src[i]);
}

}  // namespace cpu
}  // namespace ddp
