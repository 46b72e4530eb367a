// im2col and its adjoint for Conv2d's CPU kernels (contracts: tensor/im2col.h).
#include "tensor/im2col.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/im2col_avx512.h"

namespace ddp {
namespace cpu {
namespace {

// The columns [ox_begin, ox_end) of an output row whose input column ox*stride + offset is inside
// [0, width); the others read zero padding.
struct ValidRange {
  int64_t begin, end;
};
ValidRange ValidOutputColumns(int64_t offset, int64_t stride, int64_t width, int64_t out_width) {
  int64_t begin = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t end = width - 1 - offset < 0 ? 0 : (width - 1 - offset) / stride + 1;
  end = std::min(end, out_width);
  begin = std::min(begin, end);
  return {begin, end};
}

// The output rows oy in [begin, end) whose input row oy*stride + ki - padding is inside [0, h).
ValidRange ValidOutputRows(int64_t ki, const ConvGeometry& g) {
  return ValidOutputColumns(ki - g.padding, g.stride, g.h, g.oh);
}

// True when one (ki, kj) row of col is, over its valid output rows, a single shifted contiguous run of
// the input plane: stride 1 and ow == w, so consecutive output rows read consecutive input rows.
bool RowsAreContiguous(const ConvGeometry& g) { return g.stride == 1 && g.ow == g.w; }

// Zeroes the padding columns [0, cols.begin) and [cols.end, ow) of output rows [rows.begin, rows.end).
// Column-outer loops: a few strided stores per row instead of two tiny memset calls per row.
template <typename T>
void ZeroEdgeColumns(T* row, const ConvGeometry& g, ValidRange rows, ValidRange cols) {
  for (int64_t ox = 0; ox < cols.begin; ++ox) {
    for (int64_t oy = rows.begin; oy < rows.end; ++oy) row[oy * g.ow + ox] = T{};
  }
  for (int64_t ox = cols.end; ox < g.ow; ++ox) {
    for (int64_t oy = rows.begin; oy < rows.end; ++oy) row[oy * g.ow + ox] = T{};
  }
}

// Unfolds one image x [c, h, w] into col rows of stride `ld` (Note [Conv2d image groups]). Row
// (ch, ki, kj) holds x[ch, oy*s + ki - pad, ox*s + kj - pad] at column oy*ow + ox (0 outside the
// image). With RowsAreContiguous the valid rows are one memcpy plus zeroed edge columns. T is float, or
// BFloat16 for the bf16 GEMMs of mixed precision (T{} is zero in both).
template <typename T>
void Im2ColImage(const T* x, const ConvGeometry& g, T* col, int64_t ld) {
  const int64_t s = g.stride, ow = g.ow, oh = g.oh;
  const bool contiguous = RowsAreContiguous(g);
  for (int64_t ch = 0; ch < g.c; ++ch) {
    const T* plane = x + ch * g.h * g.w;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const ValidRange rows = ValidOutputRows(ki, g);
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        T* row = col + ((ch * g.kh + ki) * g.kw + kj) * ld;
        const int64_t offset = kj - g.padding;
        const ValidRange cols = ValidOutputColumns(offset, s, g.w, ow);
        std::fill(row, row + rows.begin * ow, T{});
        std::fill(row + rows.end * ow, row + oh * ow, T{});
        if (rows.begin >= rows.end) continue;
        if (contiguous) {
          // Element t of the run reads src[t]; only in-bounds elements are copied, from the first
          // valid column of the first row to the last valid column of the last row.
          const int64_t first = cols.begin, last = (rows.end - rows.begin - 1) * ow + cols.end;
          T* dst = row + rows.begin * ow + first;
          const T* src = plane + (rows.begin + ki - g.padding) * g.w + offset + first;
          if (last > first) std::memcpy(dst, src, (last - first) * sizeof(T));
          ZeroEdgeColumns(row, g, rows, cols);
          continue;
        }
        for (int64_t oy = rows.begin; oy < rows.end; ++oy) {
          T* dst = row + oy * ow;
          const T* src = plane + (oy * s + ki - g.padding) * g.w;
          for (int64_t ox = 0; ox < cols.begin; ++ox) dst[ox] = T{};
          for (int64_t ox = cols.begin; ox < cols.end; ++ox) dst[ox] = src[ox * s + offset];
          for (int64_t ox = cols.end; ox < ow; ++ox) dst[ox] = T{};
        }
      }
    }
  }
}

// The adjoint of Im2ColImage: accumulates col rows (stride `ld`) into gx [c, h, w]. Overwrites the
// padding entries of col with zeros (col is scratch) so the contiguous case is one run per row.
void Col2ImImage(float* col, const ConvGeometry& g, int64_t ld, float* gx) {
  const int64_t s = g.stride, ow = g.ow;
  const bool contiguous = RowsAreContiguous(g);
  for (int64_t ch = 0; ch < g.c; ++ch) {
    float* plane = gx + ch * g.h * g.w;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const ValidRange rows = ValidOutputRows(ki, g);
      if (rows.begin >= rows.end) continue;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        float* row = col + ((ch * g.kh + ki) * g.kw + kj) * ld;
        const int64_t offset = kj - g.padding;
        const ValidRange cols = ValidOutputColumns(offset, s, g.w, ow);
        if (contiguous) {
          ZeroEdgeColumns(row, g, rows, cols);
          const int64_t first = cols.begin, last = (rows.end - rows.begin - 1) * ow + cols.end;
          const float* src = row + rows.begin * ow + first;
          float* dst = plane + (rows.begin + ki - g.padding) * g.w + offset + first;
          for (int64_t t = 0; t < last - first; ++t) dst[t] += src[t];
          continue;
        }
        for (int64_t oy = rows.begin; oy < rows.end; ++oy) {
          const float* src = row + oy * ow;
          float* dst = plane + (oy * s + ki - g.padding) * g.w;
          for (int64_t ox = cols.begin; ox < cols.end; ++ox) dst[ox * s + offset] += src[ox];
        }
      }
    }
  }
}

// Note [Small-image im2col]
// Where an output plane has few pixels (ResNet-18's layer3 and layer4: 7x7 and 4x4 outputs), the per-row
// work of Im2ColImage and Col2ImImage (valid ranges, fills, runs of a handful of elements) costs more than
// the copy itself, for each of the c * kh * kw rows of each image. There both run from a table built once
// per call: for each kernel tap (ki, kj) and output pixel, the offset within an input plane of the element
// it reads, or -1 for padding; a row is then P lookups. Im2Col gives the same values. Col2Im adds through
// the same table row by row, so each gx element receives its rows' contributions in Col2ImImage's order
// (that one also adds zeros at padding columns, which change no sum that starts from +0): the same bits.
// Measured with tensor/conv_bench.cc (one thread, batch 64, bf16 and float32 at ResNet-18's shapes): the
// table wins for strided convolutions with outputs up to 7x7 and for 4x4 outputs, while a stride-1 7x7
// output, whose rows are one contiguous run each, is faster through Im2ColImage's memcpy (8.6 against
// 6.9 ms forward at 256 -> 256 channels). Hence: the table for outputs of at most 16 pixels, and of at
// most 64 where the rows are not contiguous. On CPUs with AVX-512, Im2ColGroup runs Note [im2col with
// AVX-512] (tensor/im2col_avx512.cc) for these shapes instead; the table remains Col2ImGroup's, and the
// portable im2col elsewhere.
constexpr int64_t kSmallImagePixels = 64, kContiguousTablePixels = 16;

// Whether Note [Small-image im2col] applies (and the int32 table can hold the plane's offsets).
bool SmallImages(const ConvGeometry& g) {
  const bool table_wins =
      g.P() <= kContiguousTablePixels || (g.P() <= kSmallImagePixels && !RowsAreContiguous(g));
  return table_wins && g.h * g.w <= std::numeric_limits<int32_t>::max();
}

// The calling thread's table for g (Note [Small-image im2col]), rebuilt in a buffer kept across calls.
const int32_t* PixelSources(const ConvGeometry& g) {
  const int64_t P = g.P();
  thread_local std::vector<int32_t> table;
  table.resize(static_cast<size_t>(g.kh * g.kw * P));
  for (int64_t ki = 0; ki < g.kh; ++ki) {
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      int32_t* tap = table.data() + (ki * g.kw + kj) * P;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const int64_t iy = oy * g.stride + ki - g.padding, ix = ox * g.stride + kj - g.padding;
          const bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
          tap[oy * g.ow + ox] = inside ? static_cast<int32_t>(iy * g.w + ix) : -1;
        }
      }
    }
  }
  return table.data();
}

// Im2ColImage through PixelSources' table.
template <typename T>
void Im2ColImageFromTable(const T* x, const ConvGeometry& g, const int32_t* table, T* col, int64_t ld) {
  const int64_t P = g.P(), taps = g.kh * g.kw, plane = g.h * g.w;
  for (int64_t ch = 0; ch < g.c; ++ch) {
    const T* src = x + ch * plane;
    for (int64_t tap = 0; tap < taps; ++tap) {
      const int32_t* from = table + tap * P;
      T* row = col + (ch * taps + tap) * ld;
      for (int64_t p = 0; p < P; ++p) row[p] = from[p] >= 0 ? src[from[p]] : T{};
    }
  }
}

// Col2ImImage through PixelSources' table.
void Col2ImImageFromTable(const float* col, const ConvGeometry& g, const int32_t* table, int64_t ld,
                          float* gx) {
  const int64_t P = g.P(), taps = g.kh * g.kw, plane = g.h * g.w;
  for (int64_t ch = 0; ch < g.c; ++ch) {
    float* dst = gx + ch * plane;
    for (int64_t tap = 0; tap < taps; ++tap) {
      const int32_t* to = table + tap * P;
      const float* row = col + (ch * taps + tap) * ld;
      for (int64_t p = 0; p < P; ++p) {
        if (to[p] >= 0) dst[to[p]] += row[p];
      }
    }
  }
}

template <typename T>
void Im2ColGroupOf(const T* x, const ConvGeometry& g, int64_t first, int64_t count, T* col) {
  if (Im2ColGroupAvx512(x, g, first, count, col)) return;  // Note [im2col with AVX-512]
  const int64_t ld = count * g.P(), image = g.c * g.h * g.w;
  if (SmallImages(g)) {  // Note [Small-image im2col]
    const int32_t* table = PixelSources(g);
#pragma omp parallel for if (count > 1)
    for (int64_t i = 0; i < count; ++i)
      Im2ColImageFromTable(x + (first + i) * image, g, table, col + i * g.P(), ld);
    return;
  }
#pragma omp parallel for if (count > 1)
  for (int64_t i = 0; i < count; ++i) Im2ColImage(x + (first + i) * image, g, col + i * g.P(), ld);
}

}  // namespace

void Im2ColGroup(const float* x, const ConvGeometry& g, int64_t first, int64_t count, float* col) {
  Im2ColGroupOf(x, g, first, count, col);
}

void Im2ColGroup(const BFloat16* x, const ConvGeometry& g, int64_t first, int64_t count, BFloat16* col) {
  Im2ColGroupOf(x, g, first, count, col);
}

void Col2ImGroup(float* col, const ConvGeometry& g, int64_t first, int64_t count, float* gx) {
  const int64_t P = g.P(), ld = count * P, image = g.c * g.h * g.w;
  if (SmallImages(g)) {  // Note [Small-image im2col]
    const int32_t* table = PixelSources(g);
#pragma omp parallel for if (count > 1)
    for (int64_t i = 0; i < count; ++i)
      Col2ImImageFromTable(col + i * P, g, table, ld, gx + (first + i) * image);
    return;
  }
#pragma omp parallel for if (count > 1)
  for (int64_t i = 0; i < count; ++i) Col2ImImage(col + i * P, g, ld, gx + (first + i) * image);
}

}  // namespace cpu
}  // namespace ddp
