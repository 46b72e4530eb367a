#include "tensor/pool_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "base/check.h"

namespace ddp {
namespace cpu {
namespace {

#ifdef __AVX2__
// Elements 0, 2, ..., 14 (EvenLanes) or 1, 3, ..., 15 (OddLanes) of the 16 floats lo:hi, in order.
__m256 EvenLanes(__m256 lo, __m256 hi) {
  const __m256 mixed = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));  // 0 2 8 10 | 4 6 12 14
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(mixed), _MM_SHUFFLE(3, 1, 2, 0)));
}
__m256 OddLanes(__m256 lo, __m256 hi) {
  const __m256 mixed = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(mixed), _MM_SHUFFLE(3, 1, 2, 0)));
}
#endif

// Max over each window of one plane, as PyTorch: scan in row-major order, take a value when it is
// greater than the best so far or NaN (so ties keep the first maximum and NaN propagates). With kRelu,
// of Relu(x) (Note [ReLU then MaxPool2d in one pass]): the best starts at 0 and NaN never wins.
template <bool kRelu>
void MaxPoolPlaneAnyKernel(const float* x, const PoolGeometry& g, float* y, int32_t* index) {
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t start = oy * g.stride * g.w + ox * g.stride;
      float best = kRelu ? 0.0f : -std::numeric_limits<float>::infinity();
      int32_t best_at = static_cast<int32_t>(start) | (kRelu ? kNoGradient : 0);
      for (int64_t ki = 0; ki < g.kernel; ++ki) {
        const float* row = x + start + ki * g.w;
        for (int64_t kj = 0; kj < g.kernel; ++kj) {
          const float v = row[kj];
          if (v > best || (!kRelu && std::isnan(v))) {
            best = v;
            best_at = static_cast<int32_t>(start + ki * g.w + kj);
          }
        }
      }
      y[oy * g.ow + ox] = best;
      index[oy * g.ow + ox] = best_at;
    }
  }
}

// The common 2x2 / stride 2 case, one output row at a time: the window's four values a b / c d are
// taken in scan order with branch-free selects (a value wins when greater than the best so far or NaN,
// so ties keep the first maximum and the last NaN wins, as MaxPoolPlane). With AVX2, eight outputs at
// once: the even and odd columns of two input rows are split apart and the same selects run as vector
// compares and blends. A row's last outputs (fewer than eight) are computed as a whole block too, since a
// scalar tail compiles to branches that random data mispredicts (Note [Pooling rows that overrun]): with
// `overrun` the block reads and writes past the row's end, else it uses masked loads and stores. With
// kRelu the best starts at 0 with the top-left offset plus kNoGradient, and NaN never wins (Note [ReLU then
// MaxPool2d in one pass]).
template <bool kRelu>
void MaxPoolRow2x2(const float* r0, const float* r1, int64_t ow, int32_t w, int32_t base, bool overrun,
                   float* yo, int32_t* io) {
#ifdef __AVX2__
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t ox = 0; ox < ow; ox += 8) {
    const int32_t count = overrun ? 8 : static_cast<int32_t>(std::min<int64_t>(8, ow - ox));
    // Input lanes [0, 2 * count) of the 16 this block reads, split over the two vectors; outputs [0, count).
    const __m256i in_lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * count), lanes);
    const __m256i in_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * count - 8), lanes);
    auto load = [&](const float* p, __m256i mask) {
      return count == 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask);
    };
    const __m256 r0_lo = load(r0 + 2 * ox, in_lo), r0_hi = load(r0 + 2 * ox + 8, in_hi);
    const __m256 r1_lo = load(r1 + 2 * ox, in_lo), r1_hi = load(r1 + 2 * ox + 8, in_hi);
    __m256 best = kRelu ? _mm256_setzero_ps() : EvenLanes(r0_lo, r0_hi);
    __m256i at = _mm256_set1_epi32(kRelu ? kNoGradient : 0);
    auto consider = [&](__m256 v, int32_t offset) {
      const __m256 greater = _mm256_cmp_ps(v, best, _CMP_GT_OQ);
      const __m256 take = kRelu ? greater : _mm256_or_ps(greater, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      best = _mm256_blendv_ps(best, v, take);
      at = _mm256_castps_si256(
          _mm256_blendv_ps(_mm256_castsi256_ps(at), _mm256_castsi256_ps(_mm256_set1_epi32(offset)), take));
    };
    if (kRelu) consider(EvenLanes(r0_lo, r0_hi), 0);
    consider(OddLanes(r0_lo, r0_hi), 1);
    consider(EvenLanes(r1_lo, r1_hi), w);
    consider(OddLanes(r1_lo, r1_hi), w + 1);
    const __m256i top_left = _mm256_add_epi32(_mm256_set1_epi32(base + 2 * static_cast<int32_t>(ox)),
                                              _mm256_add_epi32(lanes, lanes));
    const __m256i index = _mm256_add_epi32(top_left, at);
    if (count == 8) {
      _mm256_storeu_ps(yo + ox, best);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(io + ox), index);
    } else {
      const __m256i out = _mm256_cmpgt_epi32(_mm256_set1_epi32(count), lanes);
      _mm256_maskstore_ps(yo + ox, out, best);
      _mm256_maskstore_epi32(io + ox, out, index);
    }
  }
#else
  for (int64_t ox = 0; ox < ow; ++ox) {
    const float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
    float best = kRelu ? 0.0f : a;
    int32_t at = kRelu ? kNoGradient : 0;
    if (kRelu && a > best) {
      best = a;
      at = 0;
    }
    const bool take_b = b > best || (!kRelu && b != b);
    best = take_b ? b : best;
    at = take_b ? 1 : at;
    const bool take_c = c > best || (!kRelu && c != c);
    best = take_c ? c : best;
    at = take_c ? w : at;
    const bool take_d = d > best || (!kRelu && d != d);
    best = take_d ? d : best;
    at = take_d ? w + 1 : at;
    yo[ox] = best;
    io[ox] = base + 2 * static_cast<int32_t>(ox) + at;
  }
#endif
}

// Note [Pooling rows that overrun]
// AMD's cores run masked stores as microcode (many cycles each), and the MNIST cnn's pooled rows are 14
// and 7 outputs wide, so most 8-wide blocks are a row's last: masked, they would take most of the 2x2
// forward's time. A row instead computes its last block whole when the plane holds enough after the row
// for what the block reads and writes past it (at most 8 outputs, 16 input values): those writes land in
// later rows of the same plane, which are written after (in order), and the reads only feed the lanes
// written there. Only a plane's last rows keep masked loads and stores, so nothing is read or written
// outside the plane, and planes that other threads write are never touched.

// Whether a row block that reads `in_after` floats past its input rows' end and writes `out_after`
// outputs past its output row's end stays inside the plane, given what follows the row in the plane.
bool MayOverrun(int64_t in_after, int64_t in_left, int64_t out_after, int64_t out_left) {
  return in_after <= in_left && out_after <= out_left;
}

template <bool kRelu>
void MaxPoolPlane2x2(const float* x, const PoolGeometry& g, float* y, int32_t* index) {
  const int64_t tail = g.ow % 8 == 0 ? 0 : 8 - g.ow % 8;  // outputs the last block has beyond the row
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    const float* r0 = x + 2 * oy * g.w;
    const bool overrun = MayOverrun(2 * tail - (g.w - 2 * g.ow), (g.h - 2 * oy - 2) * g.w, tail,
                                    (g.oh - 1 - oy) * g.ow);
    MaxPoolRow2x2<kRelu>(r0, r0 + g.w, g.ow, static_cast<int32_t>(g.w), static_cast<int32_t>(2 * oy * g.w),
                         overrun, y + oy * g.ow, index + oy * g.ow);
  }
}

// Note [Pooling gradients window by window]
// 2x2 windows with stride 2 do not overlap, so the gradient of each input value is the output gradient
// of its window where it was the window's winner and 0 elsewhere: each window's four values can be
// written directly, in place of zeroing the plane and then adding each output's gradient at its index,
// a read-modify-write the compiler must run one at a time (two indices might name the same value). A
// winner gets 0.0f + gy, as the scatter gives it (so -0 becomes +0); an index with kNoGradient set names
// no offset of its window, so the window gets zeros; the row and column a plane of odd size leaves
// outside every window get zeros. With AVX2, eight windows at a time (four in rows of four to seven
// windows: the cnn's pooled rows are 14 and 7 wide); a row's last block starts early enough to end at
// the row's end, computing some windows twice with the same result, since a shorter block needs masked
// stores (microcode on AMD's cores) or scalar selects, which compile to branches that random winners
// mispredict. Rows of fewer than four windows select with bit masks.

// The four gradients of one window (gy, its winner's offset `at` from the top-left) by bit masks.
void MaxPoolBackwardWindow2x2(float gy, int32_t at, int32_t w, float* row0, float* row1) {
  uint32_t bits;
  const float g = 0.0f + gy;
  std::memcpy(&bits, &g, sizeof(bits));
  auto pick = [&](int32_t offset) {
    const uint32_t picked = bits & (0u - static_cast<uint32_t>(at == offset));
    float value;
    std::memcpy(&value, &picked, sizeof(value));
    return value;
  };
  row0[0] = pick(0);
  row0[1] = pick(1);
  row1[0] = pick(w);
  row1[1] = pick(w + 1);
}

#ifdef __AVX2__
// The gradients of eight windows of one output row: gy[k] and index[k] for the window whose top-left
// offset in the plane is top_left + 2k, into row0[0, 16) and row1[0, 16) (the window's two input rows).
void MaxPoolBackwardBlock8(const float* gy, const int32_t* index, int32_t top_left, int32_t w, float* row0,
                           float* row1) {
  const __m256i at = _mm256_sub_epi32(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(index)),
      _mm256_add_epi32(_mm256_set1_epi32(top_left), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)));
  const __m256 v = _mm256_add_ps(_mm256_setzero_ps(), _mm256_loadu_ps(gy));
  auto pick = [&](int32_t offset) {
    return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(at, _mm256_set1_epi32(offset))));
  };
  auto store_row = [](float* row, __m256 even, __m256 odd) {  // even[k], odd[k] -> row[2k], row[2k + 1]
    const __m256 lo = _mm256_unpacklo_ps(even, odd), hi = _mm256_unpackhi_ps(even, odd);
    _mm256_storeu_ps(row, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(row + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
  };
  store_row(row0, pick(0), pick(1));
  store_row(row1, pick(w), pick(w + 1));
}

// MaxPoolBackwardBlock8 for four windows, into row0[0, 8) and row1[0, 8).
void MaxPoolBackwardBlock4(const float* gy, const int32_t* index, int32_t top_left, int32_t w, float* row0,
                           float* row1) {
  const __m128i at = _mm_sub_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(index)),
                                   _mm_add_epi32(_mm_set1_epi32(top_left), _mm_setr_epi32(0, 2, 4, 6)));
  const __m128 v = _mm_add_ps(_mm_setzero_ps(), _mm_loadu_ps(gy));
  auto pick = [&](int32_t offset) {
    return _mm_and_ps(v, _mm_castsi128_ps(_mm_cmpeq_epi32(at, _mm_set1_epi32(offset))));
  };
  auto store_row = [](float* row, __m128 even, __m128 odd) {
    _mm_storeu_ps(row, _mm_unpacklo_ps(even, odd));
    _mm_storeu_ps(row + 4, _mm_unpackhi_ps(even, odd));
  };
  store_row(row0, pick(0), pick(1));
  store_row(row1, pick(w), pick(w + 1));
}
#endif

// The gradients of one output row's windows (gy, index: that row's ow values) into input rows gx0 and
// gx1; `base` is the top-left offset of the row's first window in the plane.
void MaxPoolBackwardRow2x2(const float* gy, const int32_t* index, int64_t ow, int32_t w, int32_t base,
                           float* gx0, float* gx1) {
#ifdef __AVX2__
  const int64_t block = ow >= 8 ? 8 : ow >= 4 ? 4 : 0;
  if (block > 0) {
    auto run = [&](int64_t ox) {
      const int32_t top_left = base + 2 * static_cast<int32_t>(ox);
      if (block == 8) {
        MaxPoolBackwardBlock8(gy + ox, index + ox, top_left, w, gx0 + 2 * ox, gx1 + 2 * ox);
      } else {
        MaxPoolBackwardBlock4(gy + ox, index + ox, top_left, w, gx0 + 2 * ox, gx1 + 2 * ox);
      }
    };
    int64_t ox = 0;
    for (; ox + block <= ow; ox += block) run(ox);
    if (ox < ow) run(ow - block);
    return;
  }
#endif
  for (int64_t ox = 0; ox < ow; ++ox) {
    const int32_t at = index[ox] - (base + 2 * static_cast<int32_t>(ox));
    MaxPoolBackwardWindow2x2(gy[ox], at, w, gx0 + 2 * ox, gx1 + 2 * ox);
  }
}

void MaxPoolBackwardPlane2x2(const float* gy, const int32_t* index, const PoolGeometry& g, float* gx) {
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    float* gx0 = gx + 2 * oy * g.w;
    float* gx1 = gx0 + g.w;
    MaxPoolBackwardRow2x2(gy + oy * g.ow, index + oy * g.ow, g.ow, static_cast<int32_t>(g.w),
                          static_cast<int32_t>(2 * oy * g.w), gx0, gx1);
    if (g.w > 2 * g.ow) gx0[g.w - 1] = gx1[g.w - 1] = 0.0f;
  }
  if (g.h > 2 * g.oh) std::fill(gx + 2 * g.oh * g.w, gx + g.h * g.w, 0.0f);
}

}  // namespace

PoolGeometry CheckPoolShapes(const Shape& x, int64_t kernel, int64_t stride) {
  DDP_CHECK(x.size() == 4) << "MaxPool2d expects [n, c, h, w], got " << ShapeToString(x);
  DDP_CHECK(kernel >= 1 && stride >= 1) << "MaxPool2d: kernel " << kernel << " and stride " << stride
                                        << " must be >= 1";
  const int64_t h = x[2], w = x[3];
  DDP_CHECK(h >= kernel && w >= kernel) << "MaxPool2d: kernel " << kernel << " larger than input "
                                        << ShapeToString(x);
  DDP_CHECK(h * w <= std::numeric_limits<int32_t>::max()) << "MaxPool2d: plane too large";
  return {x[0] * x[1], h, w, kernel, stride, (h - kernel) / stride + 1, (w - kernel) / stride + 1};
}

void MaxPoolPlane(const float* x, const PoolGeometry& g, bool relu, float* y, int32_t* index) {
  if (g.kernel == 2 && g.stride == 2) {
    relu ? MaxPoolPlane2x2<true>(x, g, y, index) : MaxPoolPlane2x2<false>(x, g, y, index);
  } else {
    relu ? MaxPoolPlaneAnyKernel<true>(x, g, y, index) : MaxPoolPlaneAnyKernel<false>(x, g, y, index);
  }
}

void MaxPoolBackwardPlane(const float* gy, const int32_t* index, const PoolGeometry& g, float* gx) {
  if (g.kernel == 2 && g.stride == 2) {
    MaxPoolBackwardPlane2x2(gy, index, g, gx);
    return;
  }
  std::fill(gx, gx + g.h * g.w, 0.0f);
  const int64_t out_plane = g.oh * g.ow;
  for (int64_t o = 0; o < out_plane; ++o) {
    const int32_t i = index[o];
    gx[i & ~kNoGradient] += i < 0 ? 0.0f : gy[o];
  }
}

}  // namespace cpu
}  // namespace ddp
