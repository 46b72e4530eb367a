// im2col with AVX-512 (contracts: tensor/im2col_avx512.h).
//
// Note [im2col with AVX-512]
// The portable im2col (tensor/im2col.cc) copies one row of an image at a time with memcpy where a row of
// col is a contiguous run of the input (stride 1, no column padding lost), and element by element
// elsewhere: strided convolutions and, through a table, small images (Note [Small-image im2col]). The
// element loops move 3-4 GB/s, a tenth of the memcpy path, and under bf16 mixed precision they unfold
// most of ResNet-18's convolutions from layer2's first one on (forward, and the weight gradients of
// Note [bf16 weight gradients on im2col]). Two AVX-512 methods replace them; both only move bits, so col
// holds the same values:
//  - Plane in registers, where an input plane has at most two vectors of elements (64 bf16 or 32
//    float32: ResNet-18's layer4 inputs, and layer3's under bf16): a tap's row of col is, per image, one
//    load of the plane and one two-register permute (vpermt2w / vpermt2d) per vector of output pixels,
//    with a zero-mask for the padding, whatever the stride and kernel. The indices and masks are built
//    once per call from the geometry.
//  - Rows, for stride 1 or 2 and larger planes: each output row of a tap is one masked load of the
//    input row (lanes outside the image load zeros: the padding) or, at stride 2, two loads and a permute
//    that picks every other lane; then one masked store. Stride-1 geometries whose rows are contiguous
//    runs stay on the memcpy path, which moves them as fast.
// Both fill col row by row across the group's images (channel, tap, image), so each row of col is written
// from its start to its end in whole cache lines: written image by image, a 4x4 image's 16 bf16 pixels
// would be half a cache line per row, and a group's col larger than L2 (layer4's 32 images: 4.7 MB) would
// be read for ownership twice. Larger strides, and CPUs without AVX-512 F and BW, take the portable loops,
// as does everything under DDP_IM2COL_AVX512=0 (for A/B runs). Measured with tensor/im2col_bench.cc (each
// shape's image groups as the convolution forms them) on an AMX Xeon (family 6 model 167), one thread, a
// batch of 64 bf16 images at ResNet-18's shapes, DDP_IM2COL_AVX512=0 -> default: layer4's 3x3 (4x4
// images) 2.5 -> 0.57 ms, layer4.0's stride-2 1.26 -> 0.26, layer3's 3x3 (7x7) 1.31 -> 0.52, layer3.0's
// stride-2 1.83 -> 0.77, layer2.0's stride-2 3.3 -> 0.83
// (results/bench/im2col_bench_amx_2026-12-05_0211.txt).
#include "tensor/im2col_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/environment_choice.h"

// Functions that use AVX-512 instructions; called only after the CPU check in SupportsAvx512().
#define DDP_AVX512 __attribute__((target("avx512f,avx512bw")))

namespace ddp {
namespace cpu {
namespace {

// True when this CPU has AVX-512 F and BW and DDP_IM2COL_AVX512=0 is not set in the environment (read
// once; the switch is for A/B runs against the portable loops).
bool SupportsAvx512() {
  static const bool supported = [] {
    if (EnvironmentSwitch("DDP_IM2COL_AVX512", "1", "0")) return false;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  }();
  return supported;
}

// Lanes [begin, end) of a mask of up to 32 lanes, clipped to [0, 32).
uint32_t LaneBits(int64_t begin, int64_t end) {
  uint32_t bits = 0;
  for (int64_t j = std::max<int64_t>(begin, 0); j < std::min<int64_t>(end, 32); ++j) bits |= 1u << j;
  return bits;
}

// A 512-bit permute index vector, 16- or 32-bit lanes.
struct alignas(64) IndexVector {
  uint8_t bytes[64] = {};
};

// One element type's 512-bit moves: T's bits in lanes of sizeof(T) bytes, kLanes to a vector.
template <typename T>
struct Lanes;

template <>
struct Lanes<BFloat16> {
  static constexpr int64_t kLanes = 32;
  static void SetIndex(IndexVector& v, int64_t lane, int64_t value) {
    reinterpret_cast<uint16_t*>(v.bytes)[lane] = static_cast<uint16_t>(value);
  }
  DDP_AVX512 static __m512i Load(uint32_t mask, const BFloat16* p) {
    return _mm512_maskz_loadu_epi16(mask, p);
  }
  DDP_AVX512 static __m512i Pick(uint32_t keep, __m512i lo, __m512i index, __m512i hi) {
    return _mm512_maskz_permutex2var_epi16(keep, lo, index, hi);
  }
  DDP_AVX512 static void Store(BFloat16* p, uint32_t mask, __m512i v) {
    _mm512_mask_storeu_epi16(p, mask, v);
  }
};

template <>
struct Lanes<float> {
  static constexpr int64_t kLanes = 16;
  static void SetIndex(IndexVector& v, int64_t lane, int64_t value) {
    reinterpret_cast<uint32_t*>(v.bytes)[lane] = static_cast<uint32_t>(value);
  }
  DDP_AVX512 static __m512i Load(uint32_t mask, const float* p) {
    return _mm512_maskz_loadu_epi32(static_cast<__mmask16>(mask), p);
  }
  DDP_AVX512 static __m512i Pick(uint32_t keep, __m512i lo, __m512i index, __m512i hi) {
    return _mm512_maskz_permutex2var_epi32(static_cast<__mmask16>(keep), lo, index, hi);
  }
  DDP_AVX512 static void Store(float* p, uint32_t mask, __m512i v) {
    _mm512_mask_storeu_epi32(p, static_cast<__mmask16>(mask), v);
  }
};

// ---- Plane in registers ----

// Per kernel tap and vector of output pixels: where each lane reads in the two-register plane, and which
// lanes read inside the image (the others are padding: zero).
struct PlaneTaps {
  int64_t vectors = 0;             // ceil(P / kLanes) per row of col
  std::vector<IndexVector> index;  // [tap * vectors + v]
  std::vector<uint32_t> keep;      // [tap * vectors + v]
  std::vector<uint32_t> store;     // [v]: the lanes of vector v that are output pixels
  uint32_t load_lo = 0, load_hi = 0;
};

template <typename T>
void BuildPlaneTaps(const ConvGeometry& g, PlaneTaps& taps) {
  constexpr int64_t L = Lanes<T>::kLanes;
  const int64_t P = g.P(), plane = g.h * g.w;
  taps.vectors = (P + L - 1) / L;
  taps.index.assign(static_cast<size_t>(g.kh * g.kw * taps.vectors), IndexVector{});
  taps.keep.assign(taps.index.size(), 0);
  taps.store.resize(static_cast<size_t>(taps.vectors));
  for (int64_t v = 0; v < taps.vectors; ++v) taps.store[v] = LaneBits(0, P - v * L);
  taps.load_lo = LaneBits(0, plane);
  taps.load_hi = LaneBits(0, plane - L);
  for (int64_t tap = 0; tap < g.kh * g.kw; ++tap) {
    const int64_t ki = tap / g.kw, kj = tap % g.kw;
    for (int64_t p = 0; p < P; ++p) {
      const int64_t iy = p / g.ow * g.stride + ki - g.padding, ix = p % g.ow * g.stride + kj - g.padding;
      if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
      const size_t at = static_cast<size_t>(tap * taps.vectors + p / L);
      Lanes<T>::SetIndex(taps.index[at], p % L, iy * g.w + ix);
      taps.keep[at] |= 1u << (p % L);
    }
  }
}

// Channels [begin, end) of `count` images (x is the first image): each row of col, (ch, tap), is written
// from its start to its end, one image's pixels after another's, so a group's col is filled in address
// order in whole cache lines (written image by image, rows of 16 bf16 pixels are half lines, and a group
// larger than L2 is read for ownership twice). The image planes are reloaded per tap from L1/L2. The
// plan's arrays and sizes are copied to locals: the stores may alias anything, and would otherwise force
// them to be reloaded.
template <typename T>
DDP_AVX512 void PlaneInRegistersChannels(const T* x, const ConvGeometry& g, const PlaneTaps& taps,
                                         int64_t count, int64_t begin, int64_t end, T* col, int64_t ld) {
  using V = Lanes<T>;
  const int64_t plane = g.h * g.w, image = g.c * plane, P = g.P(), tap_count = g.kh * g.kw;
  const int64_t vectors = taps.vectors;
  const uint32_t load_lo = taps.load_lo, load_hi = taps.load_hi;
  const IndexVector* index = taps.index.data();
  const uint32_t* keep = taps.keep.data();
  const uint32_t* store = taps.store.data();
  const bool two_registers = plane > V::kLanes;
  for (int64_t ch = begin; ch < end; ++ch) {
    T* row = col + ch * tap_count * ld;
    for (int64_t tap = 0; tap < tap_count; ++tap, row += ld) {
      for (int64_t v = 0; v < vectors; ++v) {
        const int64_t at = tap * vectors + v;
        const __m512i pick = _mm512_load_si512(index[at].bytes);
        const uint32_t kept = keep[at], stored = store[v];
        const T* src = x + ch * plane;
        T* dst = row + v * V::kLanes;
        for (int64_t i = 0; i < count; ++i, src += image, dst += P) {
          const __m512i lo = V::Load(load_lo, src);
          const __m512i hi = two_registers ? V::Load(load_hi, src + V::kLanes) : _mm512_setzero_si512();
          V::Store(dst, stored, V::Pick(kept, lo, pick, hi));
        }
      }
    }
  }
}

// ---- Rows ----

// Per kernel column kj and vector of an output row: the input column its first lane starts at (negative
// in the left padding) and the lanes of the two loads that fall inside the input row.
struct RowTaps {
  int64_t vectors = 0;           // ceil(ow / kLanes) per output row
  std::vector<int64_t> start;    // [kj * vectors + v]
  std::vector<uint32_t> lo, hi;  // [kj * vectors + v]
  std::vector<uint32_t> store;   // [v]: the lanes of vector v that are output pixels
  IndexVector every_stride;      // lane i reads lane i * stride of the two loads
};

template <typename T>
void BuildRowTaps(const ConvGeometry& g, RowTaps& taps) {
  constexpr int64_t L = Lanes<T>::kLanes;
  taps.vectors = (g.ow + L - 1) / L;
  const size_t entries = static_cast<size_t>(g.kw * taps.vectors);
  taps.start.resize(entries);
  taps.lo.resize(entries);
  taps.hi.resize(entries);
  taps.store.resize(static_cast<size_t>(taps.vectors));
  for (int64_t v = 0; v < taps.vectors; ++v) taps.store[v] = LaneBits(0, g.ow - v * L);
  for (int64_t i = 0; i < L; ++i) Lanes<T>::SetIndex(taps.every_stride, i, i * g.stride);
  for (int64_t kj = 0; kj < g.kw; ++kj) {
    for (int64_t v = 0; v < taps.vectors; ++v) {
      const int64_t outputs = std::min(L, g.ow - v * L), span = (outputs - 1) * g.stride + 1;
      const int64_t start = v * L * g.stride + kj - g.padding;
      // Lanes j < span whose input column start + j lies in [0, w).
      const int64_t begin = std::max<int64_t>(0, -start), end = std::min(span, g.w - start);
      const size_t at = static_cast<size_t>(kj * taps.vectors + v);
      taps.start[at] = start;
      taps.lo[at] = LaneBits(begin, end);
      taps.hi[at] = LaneBits(begin - L, end - L);
    }
  }
}

// Channels [begin, end) of `count` images (x is the first image), each row of col written from its start
// to its end as in PlaneInRegistersChannels; a tap's start and masks stay in registers.
template <typename T>
DDP_AVX512 void RowsChannels(const T* x, const ConvGeometry& g, const RowTaps& taps, int64_t count,
                             int64_t begin, int64_t end, T* col, int64_t ld) {
  using V = Lanes<T>;
  const __m512i zero = _mm512_setzero_si512(), pick = _mm512_load_si512(taps.every_stride.bytes);
  const bool strided = g.stride != 1;
  const int64_t vectors = taps.vectors, plane = g.h * g.w, image = g.c * plane, w = g.w, h = g.h, ow = g.ow;
  const int64_t oh = g.oh, P = g.P(), stride = g.stride, tap_count = g.kh * g.kw;
  for (int64_t ch = begin; ch < end; ++ch) {
    for (int64_t tap = 0; tap < tap_count; ++tap) {
      const int64_t ki = tap / g.kw, kj = tap % g.kw;
      T* row = col + (ch * tap_count + tap) * ld;
      for (int64_t v = 0; v < vectors; ++v) {
        const int64_t at = kj * vectors + v, start = taps.start[at];
        const uint32_t lo = taps.lo[at], hi = taps.hi[at], store = taps.store[v];
        for (int64_t i = 0; i < count; ++i) {
          const T* src_plane = x + i * image + ch * plane;
          T* dst = row + i * P + v * V::kLanes;
          for (int64_t oy = 0; oy < oh; ++oy, dst += ow) {
            const int64_t iy = oy * stride + ki - g.padding;
            if (iy < 0 || iy >= h) {
              V::Store(dst, store, zero);
              continue;
            }
            // Masked-off lanes are neither read nor faulted on, so a start left of the row (or of x) is safe.
            const T* from = src_plane + iy * w + start;
            __m512i values = V::Load(lo, from);
            if (strided) values = V::Pick(~0u, values, pick, hi != 0 ? V::Load(hi, from + V::kLanes) : zero);
            V::Store(dst, store, values);
          }
        }
      }
    }
  }
}

// ---- Choice and dispatch ----

enum class Method { kPortable, kPlaneInRegisters, kRows };

template <typename T>
Method MethodFor(const ConvGeometry& g) {
  constexpr int64_t L = Lanes<T>::kLanes;
  if (g.h * g.w <= 2 * L) return Method::kPlaneInRegisters;
  const bool contiguous_rows = g.stride == 1 && g.ow == g.w;
  if (g.stride <= 2 && !contiguous_rows) return Method::kRows;
  return Method::kPortable;
}

template <typename T>
bool GroupAvx512(const T* x, const ConvGeometry& g, int64_t first, int64_t count, T* col) {
  if (!SupportsAvx512()) return false;
  const int64_t P = g.P(), ld = count * P, image = g.c * g.h * g.w;
  switch (MethodFor<T>(g)) {
    case Method::kPlaneInRegisters: {
      thread_local PlaneTaps built;
      BuildPlaneTaps<T>(g, built);
      const PlaneTaps* taps = &built;  // this thread's, shared with the team below
      const T* images = x + first * image;
#pragma omp parallel for if (count * g.c > 64)
      for (int64_t ch = 0; ch < g.c; ++ch)
        PlaneInRegistersChannels(images, g, *taps, count, ch, ch + 1, col, ld);
      return true;
    }
    case Method::kRows: {
      thread_local RowTaps built;
      BuildRowTaps<T>(g, built);
      const RowTaps* taps = &built;
      const T* images = x + first * image;
#pragma omp parallel for if (count * g.c > 64)
      for (int64_t ch = 0; ch < g.c; ++ch) RowsChannels(images, g, *taps, count, ch, ch + 1, col, ld);
      return true;
    }
    case Method::kPortable:
      return false;
  }
  return false;
}

}  // namespace

bool Im2ColGroupAvx512(const float* x, const ConvGeometry& g, int64_t first, int64_t count, float* col) {
  return GroupAvx512(x, g, first, count, col);
}

bool Im2ColGroupAvx512(const BFloat16* x, const ConvGeometry& g, int64_t first, int64_t count,
                       BFloat16* col) {
  return GroupAvx512(x, g, first, count, col);
}

}  // namespace cpu
}  // namespace ddp

#undef DDP_AVX512
